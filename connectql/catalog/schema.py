"""The catalog's tables, versioned: each migration runs once, in order, on an existing home."""

from __future__ import annotations

# Tables a user may SELECT from; anything else in the catalog is private (raw options, settings).
PUBLIC_TABLES = (
    "connectors",
    "streams",
    "connector_events",
    "connector_metrics",
    "connector_offsets",
    "connector_tables",
)

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "initial tables",
        [
            """CREATE TABLE connectors (
                name VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, type VARCHAR NOT NULL,
                stream VARCHAR, state VARCHAR NOT NULL, desired_state VARCHAR NOT NULL,
                tasks INTEGER, options JSON, transform VARCHAR,
                created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL,
                rows_total BIGINT NOT NULL DEFAULT 0, rows_per_sec DOUBLE,
                last_batch_at TIMESTAMP, lag BIGINT, last_error VARCHAR)""",
            # Options exactly as given (inline secrets included): never read by user SQL.
            """CREATE TABLE connector_config (
                name VARCHAR PRIMARY KEY, options JSON NOT NULL, select_sql VARCHAR)""",
            """CREATE TABLE streams (
                name VARCHAR PRIMARY KEY, schema VARCHAR, schema_json JSON, retention VARCHAR,
                path VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL, created_by VARCHAR)""",
            """CREATE TABLE connector_events (
                time TIMESTAMP NOT NULL, connector VARCHAR NOT NULL, from_state VARCHAR,
                to_state VARCHAR NOT NULL, reason VARCHAR, error VARCHAR)""",
            """CREATE TABLE connector_metrics (
                connector VARCHAR NOT NULL, batch_id BIGINT NOT NULL, started_at TIMESTAMP,
                duration_ms BIGINT, input_rows BIGINT, input_rows_per_sec DOUBLE,
                processed_rows_per_sec DOUBLE)""",
            """CREATE TABLE connector_offsets (
                connector VARCHAR PRIMARY KEY, committed_offset JSON, latest_offset JSON,
                committed_at TIMESTAMP)""",
            "CREATE TABLE settings (key VARCHAR PRIMARY KEY, value VARCHAR)",
        ],
    ),
]

MIGRATIONS.append(
    (
        2,
        "record counts that reconcile: read = written + filtered + dead-lettered",
        [
            "ALTER TABLE connectors ADD COLUMN rows_written BIGINT DEFAULT 0",
            "ALTER TABLE connectors ADD COLUMN rows_filtered BIGINT DEFAULT 0",
            "ALTER TABLE connectors ADD COLUMN rows_dead_lettered BIGINT DEFAULT 0",
            "ALTER TABLE connector_metrics ADD COLUMN written_rows BIGINT",
            "ALTER TABLE connector_metrics ADD COLUMN filtered_rows BIGINT",
            "ALTER TABLE connector_metrics ADD COLUMN dead_lettered_rows BIGINT",
        ],
    )
)

MIGRATIONS.append(
    (
        3,
        "a stream's key: the columns identifying a row (from a database source's primary key)",
        ["ALTER TABLE streams ADD COLUMN key VARCHAR"],
    )
)

MIGRATIONS.append(
    (
        4,
        "the tables a multi-table source captures (each into its own stream)",
        ["ALTER TABLE connectors ADD COLUMN tables JSON"],
    )
)

MIGRATIONS.append(
    (
        5,
        "stream retention by size and policy; a stream's size and its readers' progress;"
        " records a sink lost to retention",
        [
            "ALTER TABLE streams ADD COLUMN retention_bytes VARCHAR",
            "ALTER TABLE streams ADD COLUMN retention_policy VARCHAR",
            "ALTER TABLE streams ADD COLUMN records BIGINT",
            "ALTER TABLE streams ADD COLUMN files BIGINT",
            "ALTER TABLE streams ADD COLUMN bytes BIGINT",
            "ALTER TABLE streams ADD COLUMN oldest_record TIMESTAMP",
            "ALTER TABLE streams ADD COLUMN newest_record TIMESTAMP",
            "ALTER TABLE streams ADD COLUMN readers JSON",
            "ALTER TABLE streams ADD COLUMN measured_at TIMESTAMP",
            "ALTER TABLE connectors ADD COLUMN rows_lost BIGINT DEFAULT 0",
        ],
    )
)

MIGRATIONS.append(
    (
        6,
        "stream options beyond retention (merge.target.bytes, ...), as given",
        ["ALTER TABLE streams ADD COLUMN options JSON"],
    )
)

MIGRATIONS.append(
    (
        7,
        "a source's lag in bytes where it can say (s3: bytes of objects not read to the end)",
        ["ALTER TABLE connectors ADD COLUMN lag_bytes BIGINT"],
    )
)

MIGRATIONS.append(
    (
        8,
        "a several-table source's tables stopped by a value they cannot read: {table: error}",
        ["ALTER TABLE connectors ADD COLUMN tables_failed JSON"],
    )
)

MIGRATIONS.append(
    (
        9,
        "the connector's last batch duration (for /metrics, without a scan of connector_metrics)",
        ["ALTER TABLE connectors ADD COLUMN last_batch_ms BIGINT"],
    )
)

# A row per table of a source of several tables, per stream of a sink of several streams: its
# state (a cdc source's tables are snapshotted one after another, then all follow the change
# log; a table added later, or asked again by ALTER ... SNAPSHOT TABLE, is read whole while the
# log flows: "catchup" in the offset), the records of its stream, where its snapshot is, and
# why it stopped.
TABLES_VIEW = """CREATE OR REPLACE VIEW connector_tables AS
SELECT c.name AS connector, c.kind, t.name AS "table", d.stream,
  CASE WHEN d.error IS NOT NULL THEN 'stopped'
       WHEN c.kind = 'sink' THEN 'writing'
       WHEN o.committed_offset IS NULL THEN 'waiting'
       WHEN o.committed_offset->'catchup'->>0 = t.name THEN 'snapshotting'
       WHEN o.committed_offset->>'phase' = 'stream' THEN 'streaming'
       WHEN o.committed_offset->>'phase' IS NULL THEN 'reading'
       WHEN t.place < list_position(CAST(c.tables AS VARCHAR[]), o.committed_offset->>'table')
         THEN 'snapshotted'
       WHEN t.name = coalesce(o.committed_offset->>'table', CAST(c.tables AS VARCHAR[])[1])
         THEN 'snapshotting'
       ELSE 'waiting' END AS state,
  s.records,
  CASE WHEN o.committed_offset->'catchup'->>0 = t.name
       THEN CAST(o.committed_offset->'catchup'->1 AS VARCHAR)
       WHEN o.committed_offset->>'phase' = 'snapshot'
        AND t.name = coalesce(o.committed_offset->>'table', CAST(c.tables AS VARCHAR[])[1])
       THEN CAST(o.committed_offset->'after' AS VARCHAR) END AS snapshot_after,
  CASE WHEN o.committed_offset->'catchup'->>0 = t.name
       THEN TRY_CAST(o.committed_offset->'catchup'->>4 AS BIGINT)
       WHEN o.committed_offset->>'phase' = 'snapshot'
        AND t.name = coalesce(o.committed_offset->>'table', CAST(c.tables AS VARCHAR[])[1])
       THEN TRY_CAST(o.committed_offset->>'read' AS BIGINT) END AS rows_read,
  CASE WHEN o.committed_offset->'catchup'->>0 = t.name
       THEN TRY_CAST(o.committed_offset->'catchup'->>5 AS BIGINT)
       WHEN o.committed_offset->>'phase' = 'snapshot'
        AND t.name = coalesce(o.committed_offset->>'table', CAST(c.tables AS VARCHAR[])[1])
       THEN TRY_CAST(o.committed_offset->>'estimate' AS BIGINT) END AS rows_estimate,
  d.error
FROM connectors c,
  LATERAL (SELECT unnest(CAST(c.tables AS VARCHAR[])) AS name,
                  generate_subscripts(CAST(c.tables AS VARCHAR[]), 1) AS place) t,
  LATERAL (SELECT
    CASE WHEN c.kind = 'sink' THEN t.name
         ELSE c.stream || '_' || regexp_replace(t.name, '[^A-Za-z0-9_]', '_', 'g') END AS stream,
    json_extract_string(c.tables_failed, '$."' || t.name || '"') AS error) d
LEFT JOIN connector_offsets o ON o.connector = c.name
LEFT JOIN streams s ON s.name = d.stream"""

MIGRATIONS.append(
    (10, "connector_tables: each table of a source, each stream of a sink", [TABLES_VIEW])
)

MIGRATIONS.append(
    (
        11,
        "a several-table source's tables added after its CREATE (found while running, ALTER)",
        ["ALTER TABLE connectors ADD COLUMN tables_added JSON"],
    )
)

MIGRATIONS.append(
    (
        12,
        "a source's tables to read again whole (ALTER ... SNAPSHOT TABLE), and their progress",
        [
            "ALTER TABLE connectors ADD COLUMN tables_snapshot JSON",
            TABLES_VIEW,  # a home that ran 10 first had it without the tables read again
        ],
    )
)

MIGRATIONS.append(
    (
        13,
        "connector_tables: the rows a table's snapshot has read, of the database's estimate",
        [TABLES_VIEW],
    )
)

LATEST = MIGRATIONS[-1][0]

# connector_metrics keeps this many recent batches per connector
METRICS_RETENTION_BATCHES = 1000


def migrate(con) -> int:
    """Bring the catalog at `con` to the latest version; returns the version it found."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied_at TIMESTAMP)")
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    found = row[0] or 0
    for version, _doc, statements in MIGRATIONS:
        if version <= found:
            continue
        con.execute("BEGIN TRANSACTION")
        for sql in statements:
            con.execute(sql)
        con.execute("INSERT INTO schema_version VALUES (?, current_timestamp)", [version])
        con.execute("COMMIT")
    return found
