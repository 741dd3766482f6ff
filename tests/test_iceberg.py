"""The iceberg sink (pyiceberg, a SQLite SQL catalog; no Spark jar): every row once across a
replayed batch in append mode (the batch id in the snapshots' summary, committed with the data);
a change stream upserted by key (updates, deletes, each key's last change of a batch by __pos);
a PostgreSQL cdc source into an Iceberg table equal to the source after inserts, updates,
deletes and an added column; and a sink of several streams, a table each."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.sql import SqlCatalog

from connectql.connectors.iceberg.catalog import pooled
from connectql.connectors.iceberg.sink import IcebergSink
from connectql.connectors.iceberg.source import IcebergSource
from connectql.errors import ConnectQLError
from connectql.toolkit.testing import SinkRun, SourceRun, options_of
from tests.helpers import read_parquet_rows, run
from tests.lakes import (
    CHANGE_BATCHES,
    CHANGE_SCHEMA,
    CHANGED,
    appends_are_read_once,
    awkward_types_round_trip,
    cdc_into,
    commit_interval_is_the_trigger,
)
from tests.s3server import ACCESS_KEY, SECRET_KEY, TABLE_BUCKET, s3server  # noqa: F401
from tests.test_postgres import cdc_dbs  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark


def lake(tmp_path) -> dict:
    (tmp_path / "wh").mkdir(exist_ok=True)
    return {"catalog.uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "wh")}


def rows_of(options: dict, table: str) -> list[dict] | None:
    """The table's rows, read with pyiceberg from the catalog the sink wrote (None: no table)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    catalog = SqlCatalog(
        options.get("catalog.name", "connectql"),
        uri=options["catalog.uri"],
        warehouse=f"file://{options['warehouse']}",
    )
    try:
        with pooled():  # no pyiceberg thread left behind
            return catalog.load_table(table).scan().to_arrow().to_pylist()
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def files_of(options: dict, table: str) -> int:
    """How many data files the table's current snapshot reads."""
    catalog = SqlCatalog(options["catalog.name"], uri=options["catalog.uri"],
                         warehouse=f"file://{options['warehouse']}")  # fmt: skip
    with pooled():
        t = catalog.load_table(table)
        return len(list(t.scan().plan_files()))


def test_append_writes_each_row_once_across_a_replay(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("price", pa.decimal128(10, 2))])
    options = {
        **lake(tmp_path),
        "table": "shop.events",
        "catalog.name": "events",
        "compact.every": 1,
    }
    run = SinkRun(IcebergSink, options, tmp_path, schema)
    for start in (0, 100, 200):
        run.add([{"id": i, "price": Decimal(i) / 4} for i in range(start, start + 100)])
    run.batches(1)
    run.to_end()
    last = run.replay_last_batch()
    rows = rows_of(options, "shop.events")
    assert Counter(r["id"] for r in rows) == Counter(range(300))  # each once
    assert {r["price"] for r in rows if r["id"] == 5} == {Decimal("1.25")}
    assert IcebergSink(options_of(IcebergSink, options)).last_batch("test") == last
    # compact.every = 1: each batch compacts the table: 1 data file, not 3; the record kept
    assert files_of(options, "shop.events") == 1


def test_upsert_applies_each_keys_last_change(spark, tmp_path):
    options = {**lake(tmp_path), "table": "shop.items", "key": "id"}
    run = SinkRun(IcebergSink, options, tmp_path, CHANGE_SCHEMA)
    for batch in CHANGE_BATCHES:
        run.add(batch)
    run.to_end()
    run.replay_last_batch()
    got = rows_of(options, "shop.items")
    assert sorted((r["id"], r["name"]) for r in got) == CHANGED
    assert set(got[0]) == {"id", "name"}  # no change columns


def test_awkward_values_round_trip_through_an_upsert(spark, tmp_path):
    options = {**lake(tmp_path), "table": "shop.awkward"}
    awkward_types_round_trip(tmp_path, IcebergSink, options, lambda o: rows_of(o, "shop.awkward"))
    # as docs/connectors/iceberg.md reads a table with DuckDB (no extension needed)
    catalog = SqlCatalog("connectql", uri=options["catalog.uri"],
                         warehouse=f"file://{options['warehouse']}")  # fmt: skip
    with pooled():
        con = catalog.load_table("shop.awkward").scan().to_duckdb("items")
    query = "SELECT list(id ORDER BY id), max(length(text)) FROM items"
    assert con.sql(query).fetchall() == [([1, 2, 4], 100_000)]


def test_upsert_through_a_rest_catalog_on_s3(spark, s3server, tmp_path):  # noqa: F811
    """catalog.type = 'rest' (SeaweedFS's Iceberg REST catalog, OAuth2 client credentials) and
    an s3:// warehouse reached with the s3 connector's endpoint and keys."""
    from pyiceberg.catalog.rest import RestCatalog

    namespace = f"ns{tmp_path.name[-12:].replace('-', '_')}"
    files = {k: v for k, v in s3server.options().items() if k != "bucket"}
    catalog = {"catalog.type": "rest", "catalog.uri": s3server.iceberg_url,
               "warehouse": f"s3://{TABLE_BUCKET}/"}  # fmt: skip
    options = {**catalog, **files, "table": f"{namespace}.items", "key": "id"}
    given = {**options, "catalog.credential": f"{ACCESS_KEY}:{SECRET_KEY}"}
    run = SinkRun(IcebergSink, given, tmp_path, CHANGE_SCHEMA)
    for batch in CHANGE_BATCHES:
        run.add(batch)
    run.to_end()
    last = run.replay_last_batch()
    reader = RestCatalog("r", **s3server.catalog_properties())
    with pooled():
        table = reader.load_table(f"{namespace}.items")
        got = table.scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["name"]) for r in got) == CHANGED
    assert table.metadata_location.startswith(f"s3://{TABLE_BUCKET}/")
    assert IcebergSink(options_of(IcebergSink, given)).last_batch("test") == last
    with pytest.raises(ConnectQLError, match="refused the credentials"):
        SinkRun(IcebergSink, {**options, "catalog.credential": f"{ACCESS_KEY}:wrong"},
                tmp_path / "x", CHANGE_SCHEMA)  # fmt: skip
    token = requests.post(
        f"{s3server.iceberg_url}/v1/oauth/tokens", timeout=10,
        data={"grant_type": "client_credentials", "client_id": ACCESS_KEY, "client_secret": SECRET_KEY},
    ).json()["access_token"]  # fmt: skip
    by_token = {**options, "catalog.token": token}
    source = SourceRun(IcebergSource, {k: v for k, v in by_token.items() if k != "key"},
                       tmp_path / "src")  # fmt: skip
    source.to_end()  # the source through the same REST catalog and S3
    assert sorted((r["id"], r["name"]) for r in source.rows()) == CHANGED
    assert IcebergSink(options_of(IcebergSink, by_token)).last_batch("test") == last
    with pytest.raises(ConnectQLError, match="refused the credentials"):
        IcebergSink(options_of(IcebergSink, {**options, "catalog.token": "nope"})).last_batch("t")


def test_postgres_cdc_into_an_iceberg_table(worker, pg_logical, cdc_dbs, tmp_path):  # noqa: F811
    options = lake(tmp_path)
    sink = (
        f"TO iceberg FROM pgitems WITH ('catalog.uri' = '{options['catalog.uri']}',"
        f" warehouse = '{options['warehouse']}', table = 'shop.items', mode = 'upsert')"
    )
    cdc_into(worker, pg_logical, cdc_dbs, sink, lambda: rows_of(options, "shop.items"))


def test_a_sink_of_several_streams_writes_a_table_each(worker, tmp_path):
    """streams = 'ic_*' with table = 'lake.${stream}', mode = 'append': a table per stream."""
    options = lake(tmp_path)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR ia FROM datagen INTO ic_a WITH ('rows.total' = 300,
          fields = 'id BIGINT SEQUENCE(1)', run = 'once');
        CREATE SOURCE CONNECTOR ib FROM datagen INTO ic_b WITH ('rows.total' = 200,
          fields = 'id BIGINT SEQUENCE(1)', run = 'once');
        CREATE SINK CONNECTOR ices TO iceberg WITH (streams = 'ic_*',
          'catalog.uri' = '{options["catalog.uri"]}', warehouse = '{options["warehouse"]}',
          table = 'lake.${{stream}}', mode = 'append', run = 'once');
        """,
    )
    worker.wait_for_once()
    for name, n in (("lake.ic_a", 300), ("lake.ic_b", 200)):
        assert sorted(r["id"] for r in rows_of(options, name)) == list(range(1, n + 1)), name
    run(  # and back out of the lake, through SQL
        worker,
        f"CREATE SOURCE CONNECTOR back FROM iceberg INTO ic_back WITH ("
        f"'catalog.uri' = '{options['catalog.uri']}', warehouse = '{options['warehouse']}',"
        " table = 'lake.ic_b', run = 'once')",
    )
    worker.wait_for_once(["back"])
    got = read_parquet_rows(worker.home / "streams/ic_back", "SELECT id FROM t ORDER BY id")
    assert [i for (i,) in got] == list(range(1, 201))
    commit_interval_is_the_trigger(
        worker,
        f"CREATE SINK CONNECTOR later TO iceberg FROM ic_a WITH ("
        f"'catalog.uri' = '{options['catalog.uri']}', warehouse = '{options['warehouse']}',"
        " table = 'lake.later'",
    )


def test_a_source_reads_the_table_then_each_append_once(spark, tmp_path):
    """The iceberg source: the table as it is, then each later append, every row once across
    stops and a replayed batch; a compaction (an OVERWRITE snapshot) and a delete add no row;
    starting.position = 'latest' skips the rows there before it starts; batch.max.records
    cuts between snapshots."""
    from pyiceberg.expressions import EqualTo

    source = {**lake(tmp_path), "table": "shop.events"}

    def delete_five():
        catalog = SqlCatalog("connectql", uri=source["catalog.uri"],
                             warehouse=f"file://{source['warehouse']}")  # fmt: skip
        with pooled():
            catalog.load_table("shop.events").delete(EqualTo("id", 5))

    appends_are_read_once(tmp_path, (IcebergSink, source), (IcebergSource, source), delete_five)
    with pytest.raises(ConnectQLError, match="there is no table shop.nope"):
        SourceRun(IcebergSource, {**source, "table": "shop.nope"}, tmp_path / "x").batches(1)
