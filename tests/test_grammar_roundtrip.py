"""Property test: every generated statement survives printing and parsing, alone and in scripts."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
)
from connectql.grammar.parser import parse_script, parse_statement
from connectql.grammar.printer import to_sql

KEYWORDS = ["if", "stream", "source", "sink", "secret", "offsets", "with", "from", "to", "as"]
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True) | st.sampled_from(
    KEYWORDS + [k.upper() for k in KEYWORDS]
)
tricky_text = st.sampled_from(
    ["", "it's", 'say "hi"', "a;b", "-- not a comment", "/* nor this */", "with (", "\n", "ünï€"]
)
texts = st.text(max_size=20) | tricky_text | st.lists(tricky_text, max_size=4).map("".join)

bare_keys = st.from_regex(
    r"[a-z_][a-z0-9_]{0,6}(\.[a-z0-9_]{1,6}){0,3}(-[a-z0-9]{1,4})?", fullmatch=True
)
option_keys = bare_keys | texts.filter(lambda k: k.lower() == k)
set_keys = (
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}(\.[A-Za-z0-9_]{1,6}){0,3}", fullmatch=True) | texts
)

values = st.one_of(
    texts,
    st.integers(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.builds(SecretRef, names),
)
options = st.dictionaries(option_keys, values, max_size=5)
flags = st.booleans()
optional_names = st.none() | names

sources = st.builds(
    CreateSourceConnector, names, optional_names, optional_names, options, if_not_exists=flags
)
plain_sinks = st.builds(
    CreateSinkConnector, names, optional_names, optional_names, options, if_not_exists=flags
)


@st.composite
def select_sinks(draw):
    stream = draw(names)
    # No quotes or backslashes: Spark reads those its own way inside string literals.
    note = draw(texts.filter(lambda t: "'" not in t and "\\" not in t))
    where = draw(st.sampled_from(["", f" WHERE note <> '{note}'", " where amount > -1.5"]))
    select = f"SELECT id, note FROM `{stream}`{where}"
    name, type_ = draw(names), draw(optional_names)
    flag, opts = draw(flags), draw(options)
    return CreateSinkConnector(name, type_, stream, opts, select=select, if_not_exists=flag)


creates = sources | plain_sinks | select_sinks()
selects = st.sampled_from(
    [
        "SELECT * FROM connectors",
        "select name, state from connectors where name like 'a;%' order by 1",
        "WITH t AS (SELECT 1 AS x) SELECT x FROM t",
        'SELECT "weird name" FROM streams /* ; */ WHERE 1 = 1',
    ]
)
statements = st.one_of(
    creates,
    st.builds(CreateStream, names, options, if_not_exists=flags),
    st.builds(CreateSecret, names, texts, if_not_exists=flags),
    st.builds(Show, st.sampled_from(["streams", "plugins", "secrets"])),
    st.builds(Show, st.just("connectors"), like=st.none() | texts),
    st.builds(Describe, st.sampled_from(["connector", "stream", "plugin"]), names),
    st.builds(
        ConnectorAction, st.sampled_from(["pause", "resume", "restart", "reset_offsets"]), names
    ),
    st.builds(AlterConnector, names, options),
    st.builds(AlterStream, names, options),
    st.builds(Drop, st.sampled_from(["connector", "stream", "secret"]), names, if_exists=flags),
    st.builds(Explain, creates),
    st.builds(Set, set_keys, values),
    st.builds(Select, selects),
)


def shape(obj):
    """Compared fields with value types, so True != 1 and 1.0 != 1 in the assertions."""
    if dataclasses.is_dataclass(obj):
        fields = [f.name for f in dataclasses.fields(obj) if f.compare]
        return type(obj).__name__, {name: shape(getattr(obj, name)) for name in fields}
    if isinstance(obj, dict):
        return {key: shape(value) for key, value in obj.items()}
    return type(obj).__name__, obj


SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(statements)
def test_statement_round_trips(stmt):
    sql = to_sql(stmt)
    parsed = parse_statement(sql)
    assert parsed == stmt
    assert shape(parsed) == shape(stmt)
    assert (parsed.line, parsed.text) == (1, sql)


separators = st.sampled_from(
    [";\n", " ; -- done; really\n", ";/* ; */", "\n;\n\n", ";;", "; -- a\n-- b\n/* c\n d */ "]
)


@SLOW
@given(
    st.lists(st.tuples(statements, separators), min_size=1, max_size=5),
    st.sampled_from(["", "-- header\n", "/* a\n block */\n\n  "]),
    st.sampled_from(["", ";", "; -- end", "\n"]),
)
def test_script_round_trips(pairs, header, footer):
    script, starts = header, []
    for i, (stmt, separator) in enumerate(pairs):
        starts.append(script.count("\n") + 1)
        script += to_sql(stmt) + (separator if i < len(pairs) - 1 else footer)
    parsed = parse_script(script)
    expected = [stmt for stmt, _ in pairs]
    assert parsed == expected
    assert [shape(s) for s in parsed] == [shape(s) for s in expected]
    assert [s.line for s in parsed] == starts
    assert [s.text for s in parsed] == [to_sql(s) for s in expected]
