"""Owns the SparkSession and turns plans into running Structured Streaming queries."""
