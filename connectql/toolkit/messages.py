"""Messages: the columns every broker source gives its rows (fixed by the toolkit, like the change
envelope) and the value formats (json, text, bytes, debezium, avro) a broker source parses and a
broker sink writes, so that one broker's rows go to another's sink unchanged.

A source's row is its value's columns (`format = 'json'`: the columns of `schema`, given or
inferred from a sample; 'text': `value STRING`; 'bytes': `value BINARY`; 'avro': the fields of
`avro.schema`) and then:

    __key        STRING               the message key (NULL: none)
    __headers    MAP<STRING, STRING>  its headers or properties (an empty map: none)
    __topic      STRING               the subject, topic, queue or stream key it came from
    __partition  INT                  its partition (NULL where the broker has none)
    __position   STRING               where it is: offset, sequence, entry id (as text)
    __timestamp  TIMESTAMP            the broker's timestamp of it (NULL: none)

Bytes that are not UTF-8 in a key or a header are `base64:` and their base64 (as a dead letter's
raw record): `message_bytes` gives the bytes back. A sink takes `__key` and `__headers` as the
message's key and headers when the stream has them, and leaves the message columns out of a
json value."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson

from connectql.config import Option
from connectql.errors import PlanError, ValidationError
from connectql.toolkit import debezium
from connectql.toolkit.avro import AvroSchema, derived
from connectql.toolkit.ddl import arrow_schema, spark_ddl
from connectql.toolkit.jsontext import infer_ddl, json_value, one_line
from connectql.toolkit.source import RAW_BASE64, raw_text

KEY, HEADERS, TOPIC, PARTITION, POSITION, TIMESTAMP = (
    "__key", "__headers", "__topic", "__partition", "__position", "__timestamp",
)  # fmt: skip
MESSAGE_SCHEMA = pa.schema(
    [
        (KEY, pa.string()),
        (HEADERS, pa.map_(pa.string(), pa.string())),
        (TOPIC, pa.string()),
        (PARTITION, pa.int32()),
        (POSITION, pa.string()),
        (TIMESTAMP, pa.timestamp("us", tz="UTC")),
    ]
)
MESSAGE_COLUMNS = tuple(MESSAGE_SCHEMA.names)
MESSAGE_DDL = (
    f"`{KEY}` STRING, `{HEADERS}` MAP<STRING, STRING>, `{TOPIC}` STRING, `{PARTITION}` INT,"
    f" `{POSITION}` STRING, `{TIMESTAMP}` TIMESTAMP"
)
FORMATS = ("json", "text", "bytes", "debezium", "avro")  # what a source reads and a sink writes
VALUE = "value"  # the one column of a text or bytes value
INFER_MESSAGES = 1000  # messages a json schema is inferred from


def format_options(role: str) -> tuple[Option, ...]:
    """The `format` (and for a source `schema`) options a broker connector declares, and
    avro's."""
    if role == "sink":
        doc = (
            "json: each row as a JSON object (the message columns left out); text or bytes:"
            " the row's `value` column as the message; debezium: each row of a change stream"
            " as a Debezium change event (before, after, op, ts_ms, source; no schema envelope);"
            " avro: each row as one Avro datum of avro.schema (no container header, no registry)"
        )
        return (Option("format", "enum", "json", choices=FORMATS, doc=doc), _avro_option(role))
    return (
        Option(
            "format",
            "enum",
            "json",
            choices=FORMATS,
            doc="json: a JSON object per message, its fields the columns of `schema`; text: one"
            " `value STRING` column; bytes: one `value BINARY` column; debezium: Debezium's"
            " JSON change events (with or without the schema envelope), as a change stream:"
            " the row's columns, __op, __ts_ms, __pos, __source, keyed by the message key's"
            " fields; avro: each message one Avro datum of avro.schema (schemaless, no"
            " registry), its fields the columns",
        ),
        Option(
            "schema",
            doc="json: Spark DDL of the messages' fields, e.g. 'id BIGINT, name STRING';"
            f" absent: inferred at CREATE from the first {INFER_MESSAGES} messages",
        ),
        _avro_option(role),
        Option(
            "avro.confluent.header",
            "bool",
            False,
            doc="avro: each value starts with Confluent's 5-byte header (magic byte 0, a schema"
            " id), which is skipped (the id is not looked up: avro.schema decodes the datum); a"
            " value without it is a dead letter",
        ),
    )


def _avro_option(role: str) -> Option:
    if role == "sink":
        doc = (
            "avro: the record schema (Avro JSON) each row is written as, its fields columns of"
            " the stream; absent: derived from the stream's columns (each a union of null and"
            " its type, the message columns left out)"
        )
    else:
        doc = (
            "avro (required with it): the record schema (Avro JSON) of the values, e.g."
            """ '{"type": "record", "name": "click", "fields": [{"name": "id", "type": "long"}]}'"""
        )
    return Option("avro.schema", doc=doc)


def text_of(raw: bytes | str | None) -> str | None:
    """A key or header value as the message columns hold it (UTF-8 text, else base64:...)."""
    return None if raw is None else raw_text(raw)


def message_bytes(text: str | None) -> bytes | None:
    """The bytes a key or header value of the message columns stands for."""
    if text is None:
        return None
    if text.startswith(RAW_BASE64):
        try:
            return base64.b64decode(text[len(RAW_BASE64) :], validate=True)
        except ValueError:
            pass
    return text.encode("utf-8")


@dataclass(frozen=True)
class Bad:
    """A message whose value does not parse: its index in the values given, and why."""

    index: int
    why: str
    skip: bool = False  # no row and no dead letter (a Debezium tombstone)


@dataclass(frozen=True)
class ValueFormat:
    """How message values become columns (a source) and rows become values (a sink)."""

    name: str
    schema: pa.Schema | None = None  # json: the fields' types; avro: avro.schema's columns
    avro: str | None = None  # avro: avro.schema's text (None: a sink derives one)
    header: bool = False  # avro: values start with Confluent's 5-byte header

    @classmethod
    def of(cls, options: dict[str, Any], where: str) -> ValueFormat:
        """From a connector's format and schema options (schema: Spark DDL, or None)."""
        given, name = options.get("schema"), options.get("format") or "json"
        if given and name != "json":
            raise ValidationError(f"{where}: schema is for format = 'json' only")
        if options.get("avro.schema") and name != "avro":
            raise ValidationError(f"{where}: avro.schema is for format = 'avro' only")
        schema = arrow_schema(given) if given else None
        if options.get("avro.schema"):
            schema = AvroSchema.of(options["avro.schema"], where).arrow
        clash = sorted(set(MESSAGE_COLUMNS) & set(schema.names if schema else ()))
        if clash:
            raise ValidationError(f"{where}: schema must not name {', '.join(clash)}: it is added")
        header = bool(options.get("avro.confluent.header"))
        return cls(name, schema, options.get("avro.schema"), header)

    def value_schema(self) -> pa.Schema:
        if self.name == "text":
            return pa.schema([(VALUE, pa.string())])
        if self.name == "bytes":
            return pa.schema([(VALUE, pa.binary())])
        if self.schema is None and self.name == "avro":
            raise ValidationError("format = 'avro' needs avro.schema, the values' record schema")
        if self.schema is None:
            raise ValueError(f"format = '{self.name}' needs a schema (given or inferred)")
        if self.name == "debezium":
            return pa.schema([*self.schema, *debezium.CHANGE_SCHEMA])
        return self.schema

    def row_ddl(self) -> str | None:
        """Spark DDL of a source's rows: the value's columns, then the message columns; None
        for json without a schema (the source infers one: infer_ddl)."""
        if self.name in ("json", "debezium") and self.schema is None:
            return None
        return f"{spark_ddl(self.value_schema())}, {MESSAGE_DDL}"

    def reading(self, stream: pa.Schema | None) -> ValueFormat:
        """The format a source's `read` decodes with: json and debezium take their fields from
        the stream's schema as it stands (`stream_schemas`, which may have gained fields since
        CREATE)."""
        if stream is None or self.name not in ("json", "debezium"):
            return self
        added = (*MESSAGE_COLUMNS, *debezium.CHANGE_SCHEMA.names)
        return ValueFormat(self.name, pa.schema([f for f in stream if f.name not in added]))

    def row_ddl_of(
        self, sample: Sequence[bytes | None], where: str, found: str, keys: Sequence = ()
    ) -> str:
        """The source's row DDL: given, or inferred from `sample` (and a debezium event's
        `keys`; `found` says what was sampled, for the error)."""
        if (given := self.row_ddl()) is not None:
            return given
        try:
            if self.name == "debezium":
                columns = debezium.image_ddl(sample, keys)[0]
                return f"{columns}, {debezium.CHANGE_DDL}, {MESSAGE_DDL}"
            return f"{infer_ddl(sample)}, {MESSAGE_DDL}"
        except (ValueError, pa.ArrowInvalid) as e:
            raise PlanError(
                f"{where}: cannot infer the schema from {found} ({str(e).splitlines()[0]});"
                " give it with schema = '...'"
            ) from None

    def key_of(self, keys: Sequence[bytes | None], given: str | None) -> tuple[str, ...]:
        """The stream's key: the columns given (a comma list), else a debezium stream's
        message key fields (sampled), else none."""
        if given:
            return tuple(c.strip() for c in given.split(",") if c.strip())
        return debezium.key_columns(keys) if self.name == "debezium" else ()

    def check_rows(self, schema: pa.Schema, where: str) -> None:
        """A sink's check that its stream has what the format writes."""
        if self.name in ("json", "debezium"):
            return
        if self.name == "avro":
            self._avro_of(schema, where).check_fits(schema)
            return
        if VALUE not in schema.names:
            raise ValidationError(
                f"{where}: format = '{self.name}' writes the column `{VALUE}`, which the stream"
                " lacks"
            )

    def _avro_of(self, stream: pa.Schema, where: str) -> AvroSchema:
        """A sink's record schema: avro.schema, else derived from the stream's columns."""
        if self.avro:
            return AvroSchema.of(self.avro, where)
        return derived(pa.schema([f for f in stream if f.name not in MESSAGE_COLUMNS]), where)

    def row_schema(self) -> pa.Schema:
        """The source's rows: the value's columns, then the message columns."""
        return pa.schema([*self.value_schema(), *MESSAGE_SCHEMA])

    def decode(
        self,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] = (),
        positions: Sequence[str] = (),
    ) -> tuple[pa.RecordBatch, list[Bad]]:
        """The values as a batch of value_schema (a NULL value: a row of NULLs), and the ones
        that do not parse (left out of the batch: the caller drops their metadata too). A
        debezium event's key and position (sortable text) make its delete's key and __pos."""
        schema = self.value_schema()
        if self.name == "debezium":
            batch, dropped = debezium.rows(values, keys, positions, schema)
            return batch, [Bad(i, why or "", skip=why is None) for i, why in dropped]
        if self.name == "bytes":
            return pa.record_batch([pa.array(values, pa.binary())], schema=schema), []
        if self.name == "text":
            return _texts(values, schema)
        if self.name == "avro":
            batch, bad = AvroSchema.of(self.avro, "format = 'avro'").decode(values, self.header)
            return batch, [Bad(i, why) for i, why in bad]
        try:
            return _json_batch(values, schema), []
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
            pass
        good, bad = [], []
        for i, value in enumerate(values):
            try:
                good.append(_json_batch([value], schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
                bad.append(Bad(i, _reason(e)))
        table = pa.Table.from_batches(good, schema) if good else schema.empty_table()
        return _one(table, schema), bad

    def encode(self, rows: pa.Table | pa.RecordBatch) -> list[bytes | None]:
        """Each row as a message value (a sink): json objects of the columns other than the
        message columns, Avro datums of them, or the `value` column's text or bytes."""
        if self.name == "debezium":
            return debezium.events(rows, [*MESSAGE_COLUMNS, *debezium.CHANGE_SCHEMA.names])
        if self.name == "avro":
            return self._avro_of(rows.schema, "format = 'avro'").encode(rows)
        if self.name != "json":
            if VALUE not in rows.schema.names:
                raise ValueError(f"format = '{self.name}' writes the column `{VALUE}`, not found")
            column = rows.column(VALUE).to_pylist()
            return [v.encode("utf-8") if isinstance(v, str) else v for v in column]
        kept = [n for n in rows.schema.names if n not in MESSAGE_COLUMNS]
        return [
            json.dumps(r, default=json_value, ensure_ascii=False).encode("utf-8")
            for r in rows.select(kept).to_pylist()
        ]


def message_rows(
    fmt: ValueFormat,
    values: Sequence[bytes | None],
    where: Callable[[int], dict],
    meta: Callable[[list[int]], dict[str, list]],
    keys: Sequence[bytes | None] = (),
    positions: Sequence[str] = (),
) -> Iterator[Any]:
    """What a broker source's `read` yields for a page of messages: a DeadLetter for each value
    that does not parse (`where(i)`: its offset), then the others' rows with their message
    columns (`meta(kept)`: column -> values of the kept messages, by their indexes)."""
    from connectql.toolkit.source import DeadLetter

    batch, bad = fmt.decode(values, keys, positions)
    for b in bad:
        if not b.skip:
            yield DeadLetter(values[b.index] or b"", b.why, where(b.index))
    dropped = {b.index for b in bad}
    kept = [i for i in range(len(values)) if i not in dropped]
    if kept:
        yield with_messages(batch, meta(kept))


def check_destination(options: dict[str, Any], schema: pa.Schema, where: str, name: str) -> None:
    """A sink's check of where each message goes: the option `name` (a fixed topic, subject,
    key) or `name`.column (a column of the stream), exactly one of them."""
    fixed, column = options.get(name), options.get(f"{name}.column")
    if bool(fixed) == bool(column):
        raise ValidationError(f"{where}: give one of {name} and {name}.column")
    if column and column not in schema.names:
        raise ValidationError(f"{where}: {name}.column {column} is not a column of the stream")


def destinations(options: dict[str, Any], name: str, rows: pa.Table) -> list:
    """Each row's destination: its `name`.column's value, else the option `name`."""
    column = options.get(f"{name}.column")
    return rows.column(column).to_pylist() if column else [options[name]] * rows.num_rows


def column_values(rows: pa.Table, name: str) -> list:
    """A column's values (NULLs when the rows have no such column, e.g. __headers)."""
    return rows.column(name).to_pylist() if name in rows.schema.names else [None] * rows.num_rows


def with_messages(values: pa.RecordBatch, meta: dict[str, list]) -> pa.RecordBatch:
    """The value columns and the message columns (`meta`: column -> values; a column not given
    is NULL, but headers: a message without any has an empty map, since Spark turns a column
    of NULL maps into Arrow about ten times slower than one of empty maps: 8.5 s against 0.7 s
    for a million rows)."""
    n = values.num_rows
    columns = [*values.columns]
    for field in MESSAGE_SCHEMA:
        given = meta.get(field.name)
        if field.name == HEADERS:
            columns.append(_headers_array(given, n))
        else:
            columns.append(
                pa.array(given, field.type) if given is not None else pa.nulls(n, field.type)
            )
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema([*values.schema, *MESSAGE_SCHEMA]))


def _headers_array(given: list | None, n: int) -> pa.Array:
    kind = MESSAGE_SCHEMA.field(HEADERS).type
    if given is None or not any(given):
        return pa.MapArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), pa.array([], pa.string()),
                                       pa.array([], pa.string()), type=kind)  # fmt: skip
    return pa.array([h or [] for h in given], kind)


def _texts(values, schema) -> tuple[pa.RecordBatch, list[Bad]]:
    texts, bad = [], []
    for i, v in enumerate(values):
        try:
            texts.append(None if v is None else v.decode("utf-8"))
        except UnicodeDecodeError as e:
            bad.append(Bad(i, f"not UTF-8 text: {e}"))
    return pa.record_batch([pa.array(texts, pa.string())], schema=schema), bad


def _json_batch(values: Sequence[bytes | None], schema: pa.Schema) -> pa.RecordBatch:
    body = b"\n".join(b"{}" if v is None else v for v in values)
    if body.count(b"\n") != len(values) - 1:  # a value spans lines: each on one first
        body = b"\n".join(b"{}" if v is None else one_line(v) for v in values)
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pajson.read_json(io.BytesIO(body), parse_options=options)
    if table.num_rows != len(values):
        raise ValueError(f"{table.num_rows} JSON objects in {len(values)} messages")
    return _one(table.select(schema.names).cast(schema), schema)


def _one(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]
