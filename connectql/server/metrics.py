"""GET /metrics: each connector's rows, rate, lag, last batch duration, restarts and state in
Prometheus's text exposition format, read from the catalog in one query."""

from __future__ import annotations

from connectql.catalog import states

# (metric, type, help, column of METRICS_SQL)
SERIES = [
    ("connectql_connector_rows_total", "counter", "Rows read by the connector.", "rows_total"),
    (
        "connectql_connector_rows_written_total",
        "counter",
        "Rows the connector wrote to its stream or target.",
        "rows_written",
    ),
    (
        "connectql_connector_rows_filtered_total",
        "counter",
        "Rows a sink's WHERE left out.",
        "rows_filtered",
    ),
    (
        "connectql_connector_rows_dead_lettered_total",
        "counter",
        "Rows sent to the dead-letter stream.",
        "rows_dead_lettered",
    ),
    (
        "connectql_connector_rows_per_second",
        "gauge",
        "Rows per second over the last batch.",
        "rows_per_sec",
    ),
    (
        "connectql_connector_lag",
        "gauge",
        "How far the connector is behind its source's latest offset (rows, or the source's unit).",
        "lag",
    ),
    (
        "connectql_connector_batch_duration_seconds",
        "gauge",
        "Duration of the connector's last micro-batch.",
        "batch_seconds",
    ),
    (
        "connectql_connector_restarts_total",
        "counter",
        "Restarts after failures since the connector was created.",
        "restarts",
    ),
]

METRICS_SQL = """
SELECT c.name, c.kind, c.type, c.state, c.rows_total, c.rows_written, c.rows_filtered,
       c.rows_dead_lettered, c.rows_per_sec, c.lag,
       (SELECT duration_ms / 1000.0 FROM connector_metrics m WHERE m.connector = c.name
        ORDER BY batch_id DESC LIMIT 1) AS batch_seconds,
       (SELECT count(*) FROM connector_events e WHERE e.connector = c.name
        AND e.to_state = 'RESTARTING') AS restarts
FROM connectors c ORDER BY c.name"""


def exposition(catalog) -> str:
    cols, rows = catalog.query(METRICS_SQL)
    records = [dict(zip(cols, r, strict=True)) for r in rows]
    lines = [
        "# HELP connectql_connectors Connectors in the catalog.",
        "# TYPE connectql_connectors gauge",
        f"connectql_connectors {len(records)}",
    ]
    for metric, kind, doc, column in SERIES:
        lines += [f"# HELP {metric} {doc}", f"# TYPE {metric} {kind}"]
        lines += [
            f"{metric}{_labels(r)} {_number(r[column])}" for r in records if r[column] is not None
        ]
    lines += [
        "# HELP connectql_connector_state 1 for the connector's current state, 0 for the others.",
        "# TYPE connectql_connector_state gauge",
    ]
    lines += [
        f"connectql_connector_state{_labels(r, state=s)} {int(r['state'] == s)}"
        for r in records
        for s in states.STATES
    ]
    return "\n".join(lines) + "\n"


def _labels(r: dict, **extra: str) -> str:
    pairs = {"connector": r["name"], "kind": r["kind"], "type": r["type"], **extra}
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs.items()) + "}"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(v) -> str:
    return repr(float(v)) if isinstance(v, float) else str(int(v))
