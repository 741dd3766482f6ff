"""A postgres cdc source never makes the application's own writes fail (issue 48): a table
PostgreSQL cannot identify a row of (no primary key, REPLICA IDENTITY DEFAULT or NOTHING) is
refused at CREATE, naming it and the two ways out, and nothing is created; with
keyless = 'inserts' it is captured through an inserts-only publication, and its UPDATE and
DELETE still succeed. Against the private server with logical decoding."""

from __future__ import annotations

import pytest

from connectql.errors import PlanError
from tests.helpers import run, wait_until
from tests.test_multitable import stream_rows
from tests.test_postgres import cdc_dbs, connection, sql  # noqa: F401 (fixtures)

pytestmark = pytest.mark.spark


def tables(info: str) -> None:
    sql(info, "CREATE TABLE keyed (id int PRIMARY KEY, v text)")
    sql(info, "CREATE TABLE loose (n int, v text)")  # no key, REPLICA IDENTITY DEFAULT
    sql(info, "CREATE TABLE nothing (id int PRIMARY KEY, v text)")
    sql(info, "ALTER TABLE nothing REPLICA IDENTITY NOTHING")
    sql(info, "CREATE TABLE full_ (n int, v text)")
    sql(info, "ALTER TABLE full_ REPLICA IDENTITY FULL")
    for t in ("keyed", "loose", "nothing", "full_"):
        sql(info, f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 10) g")


def the_application_writes(info: str, step: int) -> None:
    """What the source's own application does: each statement must succeed."""
    for t, col in (("keyed", "id"), ("loose", "n"), ("nothing", "id"), ("full_", "n")):
        sql(info, f"INSERT INTO {t} VALUES ({100 + step}, 'new')")
        sql(info, f"UPDATE {t} SET v = 'changed' WHERE {col} = {1 + step}")
        sql(info, f"DELETE FROM {t} WHERE {col} = {5 + step}")


def publications(info: str) -> list[tuple]:
    return sql(info, "SELECT pubname, pubinsert, pubupdate, pubdelete FROM pg_publication")


def test_a_table_without_replica_identity_is_refused_naming_it_and_the_ways_out(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    (src, src_info), _ = cdc_dbs
    tables(src_info)
    for table in ("keyed, loose, nothing, full_", "%"):
        with pytest.raises(PlanError) as refused:
            run(
                worker,
                f"CREATE SOURCE CONNECTOR cap FROM postgres INTO pg WITH"
                f" ({connection(pg_logical, src)}, table = '{table}')",
            )
        text = str(refused.value)
        assert "public.loose, public.nothing have no primary key" in text, text
        assert "REPLICA IDENTITY FULL" in text and "keyless = 'inserts'" in text, text
        assert "postgres source 'cap'" in text, text
        assert "full_" not in text and "keyed" not in text, text
    assert worker.catalog.connectors() == [] and publications(src_info) == []
    the_application_writes(src_info, 0)


def test_keyless_inserts_captures_their_inserts_and_the_application_writes_on(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    (src, src_info), _ = cdc_dbs
    tables(src_info)
    run(
        worker,
        f"CREATE SOURCE CONNECTOR cap FROM postgres INTO pg WITH ({connection(pg_logical, src)},"
        " table = 'keyed, loose, nothing, full_', keyless = 'inserts')",
    )
    wait_until(
        lambda: worker.catalog.query("SELECT 1 FROM connector_offsets WHERE connector = 'cap'")[1],
        timeout=60,
        what="the slot and the first snapshot chunk",
    )
    the_application_writes(src_info, 1)  # every UPDATE and DELETE succeeds
    assert sorted(publications(src_info)) == [
        ("connectql_cap", True, True, True),
        ("connectql_cap_inserts", True, False, False),
    ]

    def changes(stream):
        return stream_rows(
            worker, stream, "SELECT __op, count(*) FROM t WHERE __op <> 'r' GROUP BY 1 ORDER BY 1"
        )

    # the keyed and REPLICA IDENTITY FULL tables: every change; the others: their inserts
    for stream in ("pg_keyed", "pg_full_"):
        wait_until(
            lambda s=stream: changes(s) == [("c", 1), ("d", 1), ("u", 1)],
            what=stream,
            diagnose=lambda s=stream: (changes(s), worker.catalog.get_connector("cap")),
        )
    for stream in ("pg_loose", "pg_nothing"):
        wait_until(
            lambda s=stream: changes(s) == [("c", 1)],
            what=stream,
            diagnose=lambda s=stream: (changes(s), worker.catalog.get_connector("cap")),
        )
    run(worker, "DROP CONNECTOR cap")
    assert publications(src_info) == []
    the_application_writes(src_info, 2)
