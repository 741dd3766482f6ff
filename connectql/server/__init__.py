"""The worker process: owns the catalog and the SparkSession, and executes statements."""
