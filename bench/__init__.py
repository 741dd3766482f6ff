"""Benchmarks of connectql against hand-written PySpark (run as `python -m bench.<name>`)."""
