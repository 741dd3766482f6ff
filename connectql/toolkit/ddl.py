"""Spark DDL ('id BIGINT, tags ARRAY<STRING>') as an Arrow schema and back, without a JVM: the
types a source parses records into on Spark's Python workers (the s3 source, the brokers')."""

from __future__ import annotations

import re

import pyarrow as pa

from connectql.errors import ValidationError

_PRIMITIVE = {
    "bigint": pa.int64(),
    "long": pa.int64(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


class _Tokens:
    def __init__(self, text: str):
        self.text, self.items, at = text, [], 0
        while at < len(text):
            m = _TOKEN.match(text, at)
            if m is None:
                if text[at:].strip():
                    self.fail(f"unexpected {text[at:].strip()[:10]!r}")
                break
            self.items.append(m.group(1))
            at = m.end()
        self.i = 0

    def fail(self, problem: str):
        raise ValidationError(f"schema '{self.text}': {problem}")

    def peek(self) -> str:
        return self.items[self.i] if self.i < len(self.items) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if expected is not None and token.lower() != expected:
            self.fail(f"expected '{expected}', got {token or 'the end'!r}")
        self.i += 1
        return token


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of Spark DDL `ddl`; ValidationError naming what is not understood."""
    tokens = _Tokens(ddl)
    fields = _fields(tokens, end="")
    if tokens.peek():
        tokens.fail(f"unexpected {tokens.peek()!r}")
    return pa.schema(fields)


def _fields(tokens: _Tokens, end: str) -> list[pa.Field]:
    fields = []
    while True:
        name = tokens.take()
        if not name or name in "<>(),:":
            tokens.fail(f"expected a column name, got {name or 'the end'!r}")
        name = name[1:-1].replace("``", "`") if name.startswith("`") else name
        if tokens.peek() == ":":
            tokens.take()
        fields.append(pa.field(name, _type(tokens)))
        while tokens.peek().lower() in ("not", "null"):  # NOT NULL: Spark's rows stay nullable
            tokens.take()
        if tokens.peek() != ",":
            break
        tokens.take()
    if tokens.peek() != end:
        tokens.fail(f"expected ',' or {end or 'the end'!r}, got {tokens.peek() or 'the end'!r}")
    return fields


def _type(tokens: _Tokens) -> pa.DataType:
    word = tokens.take().lower()
    if word in _PRIMITIVE:
        return _PRIMITIVE[word]
    if word in ("varchar", "char"):
        tokens.take("(")
        tokens.take()
        tokens.take(")")
        return pa.string()
    if word in ("decimal", "dec", "numeric"):
        precision, scale = 10, 0
        if tokens.peek() == "(":
            tokens.take()
            precision = int(tokens.take())
            if tokens.peek() == ",":
                tokens.take()
                scale = int(tokens.take())
            tokens.take(")")
        return pa.decimal128(precision, scale)
    if word == "array":
        tokens.take("<")
        item = _type(tokens)
        tokens.take(">")
        return pa.list_(item)
    if word == "map":
        tokens.take("<")
        key = _type(tokens)
        tokens.take(",")
        value = _type(tokens)
        tokens.take(">")
        return pa.map_(key, value)
    if word == "struct":
        tokens.take("<")
        fields = _fields(tokens, end=">")
        tokens.take(">")
        return pa.struct(fields)
    tokens.fail(f"unknown type {word!r}")


def spark_types(schema: pa.Schema) -> pa.Schema:
    """An inferred Arrow schema in the types Spark holds (large strings as strings,
    timestamps as UTC microseconds)."""
    return pa.schema([pa.field(f.name, _spark_type(f.type)) for f in schema])


def _spark_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC")
    return t


def spark_ddl(schema: pa.Schema) -> str:
    """Spark DDL of an Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    struct = from_arrow_schema(schema, prefer_timestamp_ntz=False)
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in struct.fields)
