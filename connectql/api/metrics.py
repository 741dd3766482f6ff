"""GET /metrics: each connector's rows, rate, lag, last batch duration, restarts and state, read
from the catalog in one query per scrape, through prometheus-client."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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
        "How many records the connector is behind its source's latest offset.",
        "lag",
    ),
    (
        "connectql_connector_lag_bytes",
        "gauge",
        "How many bytes the connector is behind (a change log's, an object store's).",
        "lag_bytes",
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
SELECT name, kind, type, state, rows_total, rows_written, rows_filtered, rows_dead_lettered,
       rows_per_sec, lag, lag_bytes, last_batch_ms / 1000.0 AS batch_seconds
FROM connectors ORDER BY name"""
RESTARTS_SQL = """
SELECT connector, count(*) FROM connector_events WHERE to_state = 'RESTARTING' GROUP BY 1"""


class CatalogCollector:
    """Every scrape reads the catalog (Catalog.read: memoised until it changes): per connector
    the SERIES and its state."""

    def __init__(self, catalog):
        self.catalog = catalog

    def collect(self):
        cols, rows = self.catalog.read(METRICS_SQL, figures=True)
        restarts = dict(self.catalog.read(RESTARTS_SQL)[1])  # changes with states, not batches
        records = [
            {**dict(zip(cols, r, strict=True)), "restarts": restarts.get(r[0], 0)} for r in rows
        ]
        yield GaugeMetricFamily(
            "connectql_connectors", "Connectors in the catalog.", value=len(records)
        )
        for metric, kind, doc, column in SERIES:
            family = _FAMILIES[kind](metric, doc, labels=LABELS)
            for r in records:
                if r[column] is not None:
                    family.add_metric(_labels(r), float(r[column]))
            yield family
        state = GaugeMetricFamily(
            "connectql_connector_state",
            "1 for the connector's current state, 0 for the others.",
            labels=[*LABELS, "state"],
        )
        for r in records:
            for s in states.STATES:
                state.add_metric([*_labels(r), s], int(r["state"] == s))
        yield state


LABELS = ["connector", "kind", "type"]
_FAMILIES = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}


def _labels(r: dict) -> list[str]:
    return [str(r["name"]), str(r["kind"]), str(r["type"])]


def registry(catalog) -> CollectorRegistry:
    """A registry of the catalog's series, to which the API adds its request latencies."""
    found = CollectorRegistry()
    found.register(CatalogCollector(catalog))
    return found


def exposition(catalog, where: CollectorRegistry | None = None) -> str:
    """Prometheus's text format of `where` (else of the catalog alone)."""
    return generate_latest(where or registry(catalog)).decode()
