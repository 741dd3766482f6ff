"""The declared types a table source carries in its stream's schema: the comment survives Spark's
DDL (quotes included), and each sink's auto.create type for it, including the cases that fall
back to the Spark type's (a Spark type that no longer matches, a key MySQL cannot index)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectql.connectors.mysql.sinktypes import created_type as mysql_created
from connectql.connectors.postgres.types import created_type as pg_created
from connectql.connectors.relational import declared


def field(spark_type, kind: str, type_: str, labels=()) -> StructField:
    """A StructField carrying a declared type, as Spark parses it from a source's DDL."""
    ddl = f"`x` {spark_type}" + declared.comment(kind, type_, labels)
    return StructType.fromDDL(ddl).fields[0]


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_the_comment_survives_spark_ddl_and_reads_back():
    f = field("STRING", "postgres", '"it\'s \\ mood"[]', ("a'b", 'c"d'))
    assert declared.of(f) == declared.Declared("postgres", '"it\'s \\ mood"[]', ("a'b", 'c"d'))
    assert declared.field_ddl(StructType.fromDDL(declared.field_ddl(f)).fields[0]) == (
        declared.field_ddl(f)
    )
    assert declared.of(StructField("y", StringType(), True, {"comment": "a note"})) is None


def plain(spark_type, comment: str) -> StructField:
    return StructField("x", spark_type, True, {"comment": comment})


def test_postgres_targets_get_the_declared_or_closest_type():
    assert pg_created(plain(StringType(), '{"postgres": "uuid"}')) == ("uuid", ())
    assert pg_created(plain(StringType(), '{"mysql": "char(8) CHARACTER SET latin1"}')) == (
        "character(8)",
        (),
    )
    assert pg_created(plain(TimestampType(), '{"mysql": "timestamp"}')) == (
        "timestamp(0) with time zone",
        (),
    )
    # the Spark type no longer matches (a transform): the sink's own type
    assert pg_created(plain(IntegerType(), '{"postgres": "uuid"}')) is None
    assert pg_created(plain(StringType(), '{"mysql": "longtext"}')) is None


def test_mysql_targets_get_the_declared_or_closest_type():
    text = "varchar(20) CHARACTER SET latin1 COLLATE latin1_swedish_ci"
    assert mysql_created(plain(StringType(), json.dumps({"mysql": text}))) == text
    assert mysql_created(plain(TimestampType(), '{"mysql": "timestamp(6)"}')) == (
        "timestamp(6) NULL"
    )
    enum = '{"postgres": "\\"mood\\"", "labels": ["ok", "it\'s"]}'
    assert mysql_created(plain(StringType(), enum)).startswith("ENUM('ok', 'it''s')")
    assert mysql_created(plain(StringType(), '{"postgres": "time(3) without time zone"}')) == (
        "TIME(3)"
    )
    # a key MySQL cannot index whole, a spatial value, a varchar too long for a row's 64 KB
    assert mysql_created(plain(StringType(), '{"mysql": "text"}'), key=True) is None
    assert mysql_created(plain(BinaryType(), '{"mysql": "point"}')) is None
    assert mysql_created(plain(StringType(), '{"postgres": "jsonb"}'), key=True) is None
    assert mysql_created(plain(StringType(), '{"postgres": "character varying(300)"}')) is None
