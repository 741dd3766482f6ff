"""pytest's root configuration: the example plugin's package is importable in Spark's Python
workers too (pyproject's `pythonpath` reaches only this process), so its tests pass before
`pip install -e examples/plugins/sqlite` as after."""

import os
from pathlib import Path

PLUGIN = str(Path(__file__).resolve().parent / "examples/plugins/sqlite")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PLUGIN, os.environ.get("PYTHONPATH")) if p)
