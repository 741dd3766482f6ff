"""Parser and printer of the connector language: every statement form and every error class."""

from __future__ import annotations

import pytest

from connectql.errors import ParseError
from connectql.grammar.ast import (
    AlterConnector,
    AlterStream,
    ConnectorAction,
    CreateSecret,
    CreateSinkConnector,
    CreateSourceConnector,
    CreateStream,
    Describe,
    Drop,
    Explain,
    SecretRef,
    Select,
    Set,
    Show,
    SnapshotTables,
)
from connectql.grammar.parser import parse_script, parse_statement
from connectql.grammar.printer import to_sql


def error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_script(text, "test.sql")
    return info.value


def where(e: ParseError) -> tuple[int, int]:
    return e.line, e.column


# ---- CREATE SOURCE / SINK ------------------------------------------------------------------------

HSTREAM_EXAMPLE = """\
create source connector source01 from mysql with
    ( "host" = "mysql-s1"
    , "port" = 3306
    , "user" = "root"
    , "password" = "password"
    , "database" = "d1"
    , "table" = "person"
    , "stream" = "stream01"
    );
"""


def test_hstream_io_example_parses_as_written():
    assert parse_script(HSTREAM_EXAMPLE) == [
        CreateSourceConnector(
            name="source01",
            type="mysql",
            stream=None,
            options={
                "host": "mysql-s1",
                "port": 3306,
                "user": "root",
                "password": "password",
                "database": "d1",
                "table": "person",
                "stream": "stream01",
            },
        )
    ]


def test_ksqldb_style_connector_option():
    stmt = parse_statement(
        "CREATE SOURCE CONNECTOR gen WITH ('connector' = 'datagen', 'rows.total' = 10)"
    )
    assert stmt == CreateSourceConnector(
        name="gen", type=None, stream=None, options={"connector": "datagen", "rows.total": 10}
    )


def test_create_source_all_clauses():
    stmt = parse_statement(
        "CREATE SOURCE CONNECTOR IF NOT EXISTS Gen01 FROM datagen INTO Events "
        "WITH (rows.per.second = 5, tasks.max = 2)"
    )
    assert stmt == CreateSourceConnector(
        name="Gen01",
        type="datagen",
        stream="Events",
        options={"rows.per.second": 5, "tasks.max": 2},
        if_not_exists=True,
    )


def test_create_sink_to_from():
    stmt = parse_statement(
        "create sink connector out1 to file from events with (path = '/tmp/out')"
    )
    assert stmt == CreateSinkConnector(
        name="out1", type="file", stream="events", options={"path": "/tmp/out"}
    )


def test_create_sink_without_type_or_stream():
    stmt = parse_statement("CREATE SINK CONNECTOR IF NOT EXISTS s WITH (connector = 'console')")
    assert stmt == CreateSinkConnector(
        name="s", type=None, stream=None, options={"connector": "console"}, if_not_exists=True
    )


def test_create_sink_as_select_takes_the_last_with():
    text = (
        "CREATE SINK CONNECTOR big TO file AS SELECT id, amount FROM orders "
        "WHERE note <> 'with (' AND amount > 10 WITH (path = '/tmp/big', note = 'with (x')"
    )
    assert parse_statement(text) == CreateSinkConnector(
        name="big",
        type="file",
        stream="orders",
        options={"path": "/tmp/big", "note": "with (x"},
        select="SELECT id, amount FROM orders WHERE note <> 'with (' AND amount > 10",
    )


def test_as_select_ignores_with_paren_in_quotes_and_comments():
    text = (
        "CREATE SINK CONNECTOR s AS SELECT a -- it's with (\n FROM t /* with ( */ "
        "WITH ('with(' = '--', b = \"with (\")"
    )
    assert parse_statement(text) == CreateSinkConnector(
        name="s",
        type=None,
        stream="t",
        options={"with(": "--", "b": "with ("},
        select="SELECT a -- it's with (\n FROM t /* with ( */",
    )


def test_create_sink_as_select_from_a_subquery():
    text = "CREATE SINK CONNECTOR s AS select * from (select a from events) t where a > 1 with ()"
    stmt = parse_statement(text)
    assert (stmt.stream, stmt.select) == (
        "events",
        "select * from (select a from events) t where a > 1",
    )


def test_as_select_must_read_exactly_one_stream():
    e = error("CREATE SINK CONNECTOR s AS SELECT * FROM a JOIN b ON a.x = b.x WITH ()")
    assert str(e) == "test.sql:1:28: AS SELECT must read from exactly one stream"
    e = error("CREATE SINK CONNECTOR s\n  AS SELECT 1 WITH ()")
    assert (e.line, e.column, e.source) == (2, 6, "test.sql")


def test_as_select_is_validated_with_script_coordinates():
    e = error("SHOW STREAMS;\nCREATE SINK CONNECTOR s AS SELECT * FROM t\n WHERE WITH (a = 1)")
    assert where(e) == (3, 2)
    assert "invalid SQL" in e.args[0] and "'WHERE'" in e.args[0]


def test_as_select_needs_options():
    e = error("CREATE SINK CONNECTOR s AS SELECT * FROM t")
    assert where(e) == (1, 28)
    assert "AS SELECT needs a WITH (...) options clause" in str(e)


# ---- other statements ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("CREATE STREAM events", CreateStream("events")),
        (
            "create stream if not exists Events with (retention = '7 days')",
            CreateStream("Events", {"retention": "7 days"}, if_not_exists=True),
        ),
        ("CREATE STREAM s WITH ()", CreateStream("s")),
        ("CREATE SECRET pw AS 'it''s'", CreateSecret("pw", "it's")),
        ('create secret if not exists pw as "x"', CreateSecret("pw", "x", if_not_exists=True)),
        ("SHOW CONNECTORS", Show("connectors")),
        ("show connectors like 'ord%'", Show("connectors", like="ord%")),
        ("SHOW STREAMS", Show("streams")),
        ("SHOW CONNECTOR PLUGINS", Show("plugins")),
        ("show plugins", Show("plugins")),
        ("Show Secrets", Show("secrets")),
        ("SHOW settings", Show("settings")),
        ("DESCRIBE CONNECTOR c1", Describe("connector", "c1")),
        ("desc stream Events", Describe("stream", "Events")),
        ("DESCRIBE PLUGIN mysql", Describe("plugin", "mysql")),
        ("PAUSE CONNECTOR c1", ConnectorAction("pause", "c1")),
        ("resume connector c1", ConnectorAction("resume", "c1")),
        ("RESTART CONNECTOR c1", ConnectorAction("restart", "c1")),
        ("RESET CONNECTOR c1 OFFSETS", ConnectorAction("reset_offsets", "c1")),
        (
            "ALTER CONNECTOR c1 SET (tasks.max = 4, 'Run' = 'once')",
            AlterConnector("c1", {"tasks.max": 4, "run": "once"}),
        ),
        (
            "alter connector shop snapshot table orders, 'my table', public.x",
            SnapshotTables("shop", ["orders", "my table", "public.x"]),
        ),
        (
            "alter stream s set (retention = '1 day', 'retention.bytes' = '10 GB')",
            AlterStream("s", {"retention": "1 day", "retention.bytes": "10 GB"}),
        ),
        ("DROP CONNECTOR c1", Drop("connector", "c1")),
        ("drop stream if exists s", Drop("stream", "s", if_exists=True)),
        ("DROP SECRET pw", Drop("secret", "pw")),
        ("SET spark.master = 'local[2]'", Set("spark.master", "local[2]")),
        ("set spark.sql.shuffle.partitions = 4", Set("spark.sql.shuffle.partitions", 4)),
        ("SET 'my key' = true", Set("my key", True)),
        ("SELECT * FROM connectors", Select("SELECT * FROM connectors")),
        (
            "with t as (select 1 as x) select x from t",
            Select("with t as (select 1 as x) select x from t"),
        ),
    ],
)
def test_statement(text, expected):
    assert parse_statement(text) == expected


def test_explain_wraps_the_create():
    stmt = parse_statement("EXPLAIN CREATE SOURCE CONNECTOR g FROM datagen WITH (rows.total = 3)")
    inner = CreateSourceConnector(name="g", type="datagen", stream=None, options={"rows.total": 3})
    assert stmt == Explain(inner)
    assert (stmt.statement.line, stmt.statement.text) == (1, to_sql(inner))


def test_explain_as_select_sink():
    stmt = parse_statement("explain create sink connector s as select a from t with ()")
    assert stmt == Explain(
        CreateSinkConnector(name="s", type=None, stream="t", options={}, select="select a from t")
    )


# ---- values, keys and names ----------------------------------------------------------------------


def test_value_kinds():
    stmt = parse_statement(
        'CREATE STREAM s WITH (a = bare.word-x, b = \'it\'\'s\', c = "say ""hi""", d = -12, '
        "e = 1.5, f = -2.5e-3, g = TRUE, h = false, i = SECRET pw, j = 'true', k = '', "
        "l = 'line1\nline2 ünï', m = secret, n = 007, o = ${env:PG_PW}, p = ${file:~/.pw},)"
    )
    assert stmt.options == {
        "a": "bare.word-x",
        "b": "it's",
        "c": 'say "hi"',
        "d": -12,
        "e": 1.5,
        "f": -0.0025,
        "g": True,
        "h": False,
        "i": SecretRef("pw"),
        "j": "true",
        "k": "",
        "l": "line1\nline2 ünï",
        "m": "secret",
        "n": 7,
        "o": "${env:PG_PW}",
        "p": "${file:~/.pw}",
    }
    assert [type(v) for v in stmt.options.values()][3:6] == [int, float, float]


def test_keys_are_lower_cased_names_are_not():
    stmt = parse_statement(
        "CREATE STREAM MyStream WITH (Tasks.Max = 1, \"ERRORS.Tolerance\" = 'all')"
    )
    assert stmt == CreateStream("MyStream", {"tasks.max": 1, "errors.tolerance": "all"})


@pytest.mark.parametrize(
    "word", ["stream", "source", "sink", "file", "data", "orders", "status", "offsets", "if"]
)
def test_common_words_work_as_names(word):
    text = f"CREATE SINK CONNECTOR {word} TO {word} FROM {word} WITH ({word} = {word}x)"
    assert parse_statement(text) == CreateSinkConnector(
        name=word, type=word, stream=word, options={word: f"{word}x"}
    )
    assert parse_statement(f"RESET CONNECTOR {word} OFFSETS") == ConnectorAction(
        "reset_offsets", word
    )
    assert parse_statement(f"DROP STREAM IF EXISTS {word}") == Drop("stream", word, if_exists=True)


def test_keyword_prefix_is_not_a_keyword():
    e = error("SETTINGS x = 1")
    assert where(e) == (1, 1)
    assert e.args[0].startswith("test.sql:1:1: unexpected 'SETTINGS', expected one of: ALTER")


# ---- scripts: splitting, comments, positions -----------------------------------------------------


def test_empty_script():
    assert parse_script("") == []
    assert parse_script("  ;; -- nothing\n/* at all */ ;\n") == []


def test_script_lines_and_texts():
    script = (
        "-- a leading comment\n"
        "\n"
        "  SHOW STREAMS ; /* between */ SHOW SECRETS -- trailing\n"
        ";\n"
        "/* spans\n lines */ DROP /* inside */ STREAM\n"
        "   -- comment between tokens\n"
        "   s1"
    )
    stmts = parse_script(script)
    assert stmts == [Show("streams"), Show("secrets"), Drop("stream", "s1")]
    assert [s.line for s in stmts] == [3, 3, 6]
    assert [s.text for s in stmts] == [
        "SHOW STREAMS",
        "SHOW SECRETS",
        "DROP /* inside */ STREAM\n   -- comment between tokens\n   s1",
    ]


def test_semicolon_inside_quotes_and_comments():
    script = "CREATE SECRET a AS 'x;y'; -- not ; a split\nCREATE SECRET b AS \"p;q\"; /* ; */"
    assert parse_script(script) == [CreateSecret("a", "x;y"), CreateSecret("b", "p;q")]


def test_select_keeps_its_text_verbatim():
    script = "SELECT ';' AS semi, 2 -- two\n FROM streams ; SELECT 1"
    assert parse_script(script) == [
        Select("SELECT ';' AS semi, 2 -- two\n FROM streams"),
        Select("SELECT 1"),
    ]


def test_error_in_third_statement_has_script_coordinates():
    script = "SHOW STREAMS;\nSHOW SECRETS;\n\n  DROP STREAM s1 s2;\nSHOW STREAMS"
    e = error(script)
    assert (e.line, e.column, e.source) == (4, 18, "test.sql")
    assert str(e) == "test.sql:4:18: unexpected 's2', expected end of statement"


def test_error_on_a_later_line_of_a_statement():
    e = error("SHOW STREAMS; CREATE STREAM s\n  WITH (a = 1,\n  b == 2)")
    assert where(e) == (3, 6)
    assert e.args[0].endswith(
        "unexpected '=', expected one of: ${env:..}, SECRET, number, string, word"
    )


def test_parse_statement_wants_exactly_one():
    assert parse_statement(" SHOW STREAMS ; ") == Show("streams")
    with pytest.raises(ParseError) as info:
        parse_statement("SHOW STREAMS; SHOW SECRETS")
    assert (info.value.line, info.value.column) == (1, 15)
    with pytest.raises(ParseError, match="found 0"):
        parse_statement("-- nothing")


# ---- error classes -------------------------------------------------------------------------------


def test_unknown_statement_start():
    e = error("\n CRATE SOURCE CONNECTOR x WITH ()")
    assert where(e) == (2, 2)
    assert e.args[0] == (
        "test.sql:2:2: unexpected 'CRATE', expected one of: ALTER, CREATE, DESC, DESCRIBE, DROP, "
        "EXPLAIN, PAUSE, RESET, RESTART, RESUME, SELECT, SET, SHOW, WITH"
    )


def test_misspelled_keyword_lists_what_fits():
    e = error("CREATE SOURCE CONNECTOR c FROM datagen WTIH (a = 1)")
    assert where(e) == (1, 40)
    assert str(e).endswith("unexpected 'WTIH', expected one of: INTO, WITH, end of statement")


def test_missing_close_paren():
    e = error("CREATE STREAM s WITH (a = 1\n;SHOW STREAMS")
    assert where(e) == (1, 28)
    assert str(e).endswith("unexpected end of statement, expected one of: ')', ','")


def test_missing_comma():
    e = error("ALTER CONNECTOR c SET (a = 1 b = 2)")
    assert where(e) == (1, 30)
    assert str(e).endswith("unexpected 'b', expected one of: ')', ','")


@pytest.mark.parametrize(
    "text, at, shown",
    [
        ("CREATE STREAM s WITH (a = @)", (1, 27), "'@'"),
        ("CREATE STREAM s WITH (a = )", (1, 27), "')'"),
        ("CREATE STREAM s WITH (a = 5x)", (1, 27), "'5x'"),
    ],
)
def test_bad_value(text, at, shown):
    e = error(text)
    assert where(e) == at
    assert f"unexpected {shown}, expected" in str(e)


@pytest.mark.parametrize(
    "text, message",
    [
        ("CREATE SECRET pw 'hunter2'", "unexpected string '****', expected AS"),
        ("create secret pw as hunter-2", "unexpected '****', expected string"),
        ("CREATE STREAM s WITH (password 'hunter2')", "unexpected string '****', expected '='"),
        ("CREATE STREAM s WITH ('ssl.key' = @hunter2)", "unexpected '****', expected one of"),
        ("SET 'fs.s3a.secret.key' 'hunter2'", "unexpected string '****', expected '='"),
        # SECRET takes a name: a quoted one may well be the value itself
        ("CREATE STREAM s WITH (a = SECRET 'hunter2')", "unexpected string '****', expected"),
        ("CREATE STREAM s WITH (host 'hunter2')", "unexpected string 'hunter2', expected '='"),
    ],
)
def test_a_syntax_error_does_not_quote_what_may_be_a_secret(text, message):
    assert message in str(error(text))


def test_explain_of_a_non_create():
    e = error("EXPLAIN SHOW STREAMS")
    assert where(e) == (1, 9)
    assert str(e).endswith("unexpected 'SHOW', expected CREATE")
    e = error("EXPLAIN CREATE STREAM s")
    assert where(e) == (1, 16)
    assert str(e).endswith("unexpected 'STREAM', expected one of: SINK, SOURCE")


def test_duplicate_option_key():
    e = error("SHOW STREAMS;\nCREATE STREAM s WITH (retention = '1 day',\n  RETENTION = '2 days')")
    assert where(e) == (3, 3)
    assert str(e) == "test.sql:3:3: duplicate option 'retention'"


def test_end_of_statement():
    e = error("SHOW STREAMS; DROP CONNECTOR -- no name\n;")
    assert where(e) == (1, 29)
    assert str(e).endswith("unexpected end of statement, expected one of: IF, name")


def test_unterminated_quote_and_comment():
    e = error("SHOW STREAMS;\nCREATE SECRET s AS 'abc;\nSHOW STREAMS")
    assert (e.line, e.column, e.args[0]) == (2, 20, "test.sql:2:20: unterminated quoted text")
    e = error("SHOW STREAMS /* never closed")
    assert (e.line, e.column, e.args[0]) == (1, 14, "test.sql:1:14: unterminated comment")


def test_bad_select_is_reported_where_sqlglot_points():
    e = error("SHOW STREAMS;\n  SELECT *\n  FROM connectors WHERE")
    assert where(e) == (3, 19)
    assert "invalid SQL" in str(e)


def test_unexpected_character():
    e = error("SHOW CONNECTORS ?")
    assert where(e) == (1, 17)
    assert str(e).endswith("unexpected '?', expected one of: LIKE, end of statement")


# ---- printer -------------------------------------------------------------------------------------


def test_printer_is_canonical():
    stmt = parse_statement(
        "create source connector if not exists c from mysql into s with "
        '("Host" = h, port = 3306, ratio = -0.5, ok = true, password = secret pw, '
        "'odd key' = 'it''s', \"tasks.max\" = 1)"
    )
    assert to_sql(stmt) == (
        "CREATE SOURCE CONNECTOR IF NOT EXISTS c FROM mysql INTO s WITH (host = 'h', port = 3306, "
        "ratio = -0.5, ok = TRUE, password = SECRET pw, 'odd key' = 'it''s', tasks.max = 1)"
    )


@pytest.mark.parametrize(
    "stmt, sql",
    [
        (CreateStream("s"), "CREATE STREAM s"),
        (Show("plugins"), "SHOW CONNECTOR PLUGINS"),
        (Show("connectors", like="a'b"), "SHOW CONNECTORS LIKE 'a''b'"),
        (ConnectorAction("reset_offsets", "c"), "RESET CONNECTOR c OFFSETS"),
        (Drop("secret", "p", if_exists=True), "DROP SECRET IF EXISTS p"),
        (Set("spark.master", "local[*]"), "SET spark.master = 'local[*]'"),
        (
            CreateSinkConnector("k", "file", "t", {}, select="SELECT a FROM t"),
            "CREATE SINK CONNECTOR k TO file AS SELECT a FROM t WITH ()",
        ),
    ],
)
def test_printer_forms(stmt, sql):
    assert to_sql(stmt) == sql
    assert parse_statement(sql) == stmt


def test_printer_rejects_non_finite_floats():
    with pytest.raises(ValueError):
        to_sql(Set("x", float("nan")))
