"""The durable truth: one DuckDB file with connectors, streams, events, metrics and offsets."""
