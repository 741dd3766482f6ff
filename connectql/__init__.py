"""connectql: manage data connectors with SQL, run them as Spark Structured Streaming queries."""

__version__ = "0.1.0"
