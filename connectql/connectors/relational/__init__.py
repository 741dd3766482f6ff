"""The database connectors' shared core (PostgreSQL, MySQL): their declaration and planning,
table reading (snapshot chunks, polling, key ranges, Arrow reads), change rows, and the sink's
staging, upsert/merge and dead letters; postgres/ and mysql/ give only what differs."""
