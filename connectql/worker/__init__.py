"""The worker process: owns the catalog and the SparkSession, executes statements, supervises
connectors, keeps streams and holds the home and its lease; it knows nothing of HTTP."""
