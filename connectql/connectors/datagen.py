"""The `datagen` source: generated rows as Arrow record batches (like Flink's or Kafka Connect's
datagen); every value of row k is a pure function of (seed, k, column), so replays are identical."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectql.connectors.base import Plugin, ReaderSpec
from connectql.connectors.common import SOURCE_COMMON
from connectql.connectors.options import Option, coerce, suggest
from connectql.errors import ValidationError

DEFAULT_FIELDS = (
    "id BIGINT SEQUENCE, user_id INT RANDOM(1, 1000), amount DOUBLE RANDOM(0, 500),"
    " status STRING CHOICE('new','paid','shipped','cancelled'), name STRING RANDOM(8),"
    " created_at TIMESTAMP NOW"
)

OPTIONS: dict[str, Option] = {
    o.name: o
    for o in [
        Option("rows.total", "int", doc="stop after this many rows; absent: unbounded"),
        Option("rows.per.second", "float", doc="rows per second; absent: as fast as possible"),
        Option("rows.per.batch", "int", 1_000_000, doc="at most this many rows per micro-batch"),
        Option(
            "fields",
            doc="columns as 'name TYPE [GENERATOR], ...', e.g. 'id BIGINT SEQUENCE,"
            " amount DOUBLE RANDOM(0, 500)'; absent: an orders-like default",
        ),
        Option("seed", "int", 0, doc="seed of the random values: same seed, same rows"),
    ]
}
_TASKS = Option("tasks.max", "int", 1, doc="input partitions per micro-batch")

BLOCK = 65_536  # rows per random block: the unit of generation and the largest batch read() yields
MAX_STRING_LENGTH = 1024
_MASK64 = (1 << 64) - 1
_DAY_MS = 86_400_000

# ---------------------------------------------------------------------------------------------
# The fields spec
# ---------------------------------------------------------------------------------------------

TYPES = ("BIGINT", "INT", "DOUBLE", "STRING", "BOOLEAN", "TIMESTAMP", "DATE")
_TYPE_ALIASES = {"LONG": "BIGINT", "INTEGER": "INT", "BOOL": "BOOLEAN"}
GENERATORS = ("SEQUENCE", "RANDOM", "CHOICE", "NOW")
_INT_RANGE = {"BIGINT": (-(2**63), 2**63 - 1), "INT": (-(2**31), 2**31 - 1)}
_DEFAULT_GENERATOR = {
    "BIGINT": ("RANDOM", (0, 1000)),
    "INT": ("RANDOM", (0, 1000)),
    "DOUBLE": ("RANDOM", (0.0, 1.0)),
    "STRING": ("RANDOM", (8,)),
    "BOOLEAN": ("RANDOM", ()),
    "TIMESTAMP": ("NOW", ()),
    "DATE": ("NOW", ()),
}

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')"
    r"|(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<punct>[(),])"
    r"|(?P<bad>\S))"
)
_BAD = {"'": "unterminated string"}


@dataclass(frozen=True)
class Field:
    """One generated column: `type` and `generator` upper-case, `args` the generator's values."""

    name: str
    type: str
    generator: str
    args: tuple = ()


@dataclass(frozen=True)
class _Token:
    kind: str  # str, num, word, punct, bad, end
    text: str
    pos: int  # 1-based character position in the spec


def _tokenize(spec: str) -> list[_Token]:
    tokens, at = [], 0
    while at < len(spec):
        m = _TOKEN.match(spec, at)
        if m is None:  # only trailing whitespace is left
            break
        kind = m.lastgroup
        tokens.append(_Token(kind, m.group(kind), m.start(kind) + 1))
        at = m.end()
    tokens.append(_Token("end", "", len(spec) + 1))
    return tokens


class _Parser:
    """Recursive descent over `name TYPE [GENERATOR [(args)]], ...` with positioned errors."""

    def __init__(self, spec: str):
        self.tokens, self.i = _tokenize(spec), 0
        self.column = "1"

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def fail(self, problem: str, token: _Token) -> NoReturn:
        if token.kind == "bad":
            problem = _BAD.get(token.text, f"unexpected character {token.text!r}")
        raise ValidationError(f"fields: column {self.column}: {problem} (at position {token.pos})")

    def parse(self) -> list[Field]:
        fields: list[Field] = []
        while True:
            self.column = str(len(fields) + 1)
            fields.append(self.column_spec())
            token = self.take()
            if token.kind == "end":
                return fields
            if token.text != ",":
                self.fail(f"expected ',' or the end, got {_shown(token)}", token)

    def column_spec(self) -> Field:
        token = self.take()
        if token.kind != "word":
            self.fail(f"expected a column name, got {_shown(token)}", token)
        self.column = f"'{token.text}'"
        type_token = self.take()
        type_ = self.type_name(type_token)
        if self.peek().kind == "end" or self.peek().text == ",":
            generator, args = _DEFAULT_GENERATOR[type_]
            return Field(token.text, type_, generator, args)
        gen_token = self.take()
        generator = self.generator_name(gen_token)
        args = self.arguments()
        return Field(token.text, type_, generator, _check(self, type_, generator, args, gen_token))

    def type_name(self, token: _Token) -> str:
        if token.kind != "word":
            self.fail(f"expected a type ({', '.join(TYPES)}), got {_shown(token)}", token)
        name = _TYPE_ALIASES.get(token.text.upper(), token.text.upper())
        if name not in TYPES:
            hint = suggest(name, TYPES) or f" (one of {', '.join(TYPES)})"
            self.fail(f"unknown type '{token.text}'{hint}", token)
        return name

    def generator_name(self, token: _Token) -> str:
        if token.kind != "word":
            self.fail(f"expected a generator or ',', got {_shown(token)}", token)
        name = token.text.upper()
        if name not in GENERATORS:
            hint = suggest(name, GENERATORS) or f" (one of {', '.join(GENERATORS)})"
            if _TYPE_ALIASES.get(self.peek().text.upper(), self.peek().text.upper()) in TYPES:
                hint = f" (a ',' missing before column '{token.text}'?)"
            self.fail(f"unknown generator '{token.text}'{hint}", token)
        return name

    def arguments(self) -> tuple | None:
        """The values in parentheses; None when there are no parentheses."""
        if self.peek().text != "(":
            return None
        self.take()
        args: list[Any] = []
        while True:
            args.append(_literal(self, self.take()))
            token = self.take()
            if token.text == ")":
                return tuple(args)
            if token.text != ",":
                self.fail(f"expected ',' or ')', got {_shown(token)}", token)


def _shown(token: _Token) -> str:
    return "the end of the spec" if token.kind == "end" else repr(token.text)


def _literal(parser: _Parser, token: _Token) -> Any:
    if token.kind == "str":
        return token.text[1:-1].replace("''", "'")
    if token.kind == "num":
        is_int = re.fullmatch(r"[-+]?\d+", token.text)
        return int(token.text) if is_int else float(token.text)
    parser.fail(f"expected a number or a 'quoted string', got {_shown(token)}", token)


def _check(parser: _Parser, type_: str, generator: str, args: tuple | None, at: _Token) -> tuple:
    """The generator's arguments, checked against the column type (defaults filled in)."""
    checks = {
        "SEQUENCE": _check_sequence,
        "RANDOM": _check_random,
        "CHOICE": _check_choice,
        "NOW": _check_now,
    }
    problem, values = checks[generator](type_, args)
    if problem:
        parser.fail(problem, at)
    return values


def _check_sequence(type_: str, args: tuple | None) -> tuple[str | None, tuple]:
    if type_ not in _INT_RANGE:
        return f"SEQUENCE needs an integer column (BIGINT, INT), not {type_}", ()
    args = args if args is not None else (0,)
    if len(args) != 1 or not _is_int(args[0], type_):
        return f"SEQUENCE takes one optional {type_} start, e.g. SEQUENCE(1)", ()
    return None, args


def _check_random(type_: str, args: tuple | None) -> tuple[str | None, tuple]:
    args = _DEFAULT_GENERATOR[type_][1] if args is None else args
    if type_ in _INT_RANGE:
        ok = len(args) == 2 and all(_is_int(a, type_) for a in args) and args[0] <= args[1]
        return (None if ok else f"RANDOM for {type_} takes (min, max), integers, min <= max"), args
    if type_ == "DOUBLE":
        ok = len(args) == 2 and all(_is_number(a) for a in args) and args[0] <= args[1]
        args = tuple(float(a) for a in args) if ok else args
        return (None if ok else "RANDOM for DOUBLE takes (min, max), numbers, min <= max"), args
    if type_ == "STRING":
        ok = len(args) == 1 and _is_int(args[0]) and 1 <= args[0] <= MAX_STRING_LENGTH
        return (None if ok else f"RANDOM for STRING takes (length), 1 to {MAX_STRING_LENGTH}"), args
    if type_ == "BOOLEAN":
        return (None if not args else "RANDOM for BOOLEAN takes no arguments"), ()
    return f"RANDOM is not available for {type_} (use NOW)", ()


def _check_choice(type_: str, args: tuple | None) -> tuple[str | None, tuple]:
    if not args:
        return "CHOICE needs at least one value, e.g. CHOICE('a', 'b')", ()
    if type_ == "STRING":
        ok = all(isinstance(a, str) for a in args)
        return (None if ok else "CHOICE for STRING takes 'quoted strings'"), args
    if type_ in _INT_RANGE:
        ok = all(_is_int(a, type_) for a in args)
        return (None if ok else f"CHOICE for {type_} takes integers that fit {type_}"), args
    if type_ == "DOUBLE":
        if not all(_is_number(a) for a in args):
            return "CHOICE for DOUBLE takes numbers", ()
        return None, tuple(float(a) for a in args)
    return f"CHOICE is not available for {type_}", ()


def _check_now(type_: str, args: tuple | None) -> tuple[str | None, tuple]:
    if type_ not in ("TIMESTAMP", "DATE"):
        return f"NOW needs a TIMESTAMP or DATE column, not {type_}", ()
    return (None if not args else "NOW takes no arguments"), ()


def _is_int(value: Any, type_: str = "BIGINT") -> bool:
    low, high = _INT_RANGE[type_]
    return isinstance(value, int) and low <= value <= high


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def parse_fields(spec: str | None) -> list[Field]:
    """The columns of a fields spec (None: the default spec); ValidationError on a bad spec."""
    spec = DEFAULT_FIELDS if spec is None else spec
    if not spec.strip():
        raise ValidationError("fields: the spec is empty; give at least one 'name TYPE'")
    fields = _Parser(spec).parse()
    seen: set[str] = set()
    for f in fields:
        if f.name.lower() in seen:
            raise ValidationError(f"fields: column '{f.name}': the name is used twice")
        seen.add(f.name.lower())
    return fields


def schema_ddl(fields: list[Field]) -> str:
    """Spark DDL of the columns, e.g. 'id BIGINT, amount DOUBLE'."""
    return ", ".join(f"{f.name} {f.type}" for f in fields)


_SPARK_TYPES: dict[str, DataType] = {
    "BIGINT": LongType(),
    "INT": IntegerType(),
    "DOUBLE": DoubleType(),
    "STRING": StringType(),
    "BOOLEAN": BooleanType(),
    "TIMESTAMP": TimestampType(),
    "DATE": DateType(),
}
_ARROW_TYPES = {
    "BIGINT": pa.int64(),
    "INT": pa.int32(),
    "DOUBLE": pa.float64(),
    "STRING": pa.string(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}
_NUMPY_TYPES = {"BIGINT": np.int64, "INT": np.int32, "DOUBLE": np.float64}


def spark_schema(fields: list[Field]) -> StructType:
    return StructType([StructField(f.name, _SPARK_TYPES[f.type], True) for f in fields])


def arrow_schema(fields: list[Field]) -> pa.Schema:
    return pa.schema([pa.field(f.name, _ARROW_TYPES[f.type]) for f in fields])


# ---------------------------------------------------------------------------------------------
# Generation: row k of column c comes from block k // BLOCK, seeded by (seed, c, block)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Block:
    """Rows [index * BLOCK + lo, index * BLOCK + hi) of one block."""

    seed: int
    index: int
    lo: int
    hi: int
    ts_ms: int


_LETTERS = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", np.uint8)


def _rng(blk: _Block, column: int) -> np.random.Generator:
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence((blk.seed & _MASK64, column, blk.index)))
    )


def _sequence(f: Field, column: int, blk: _Block) -> pa.Array:
    first = blk.index * BLOCK + blk.lo + f.args[0]
    values = np.arange(first, first + blk.hi - blk.lo, dtype=np.int64)
    return pa.array(values.astype(_NUMPY_TYPES[f.type], copy=False))  # INT wraps past 2^31


def _random(f: Field, column: int, blk: _Block) -> pa.Array:
    rng = _rng(blk, column)
    if f.type == "STRING":
        return _random_strings(rng, f.args[0], blk)
    if f.type == "DOUBLE":
        values = rng.uniform(f.args[0], f.args[1], BLOCK)
    elif f.type == "BOOLEAN":
        values = rng.integers(0, 2, BLOCK, dtype=np.uint8).view(np.bool_)
    else:
        values = rng.integers(f.args[0], f.args[1], BLOCK, _NUMPY_TYPES[f.type], endpoint=True)
    return pa.array(values[blk.lo : blk.hi])


def _random_strings(rng: np.random.Generator, length: int, blk: _Block) -> pa.Array:
    letters = _LETTERS[rng.integers(0, len(_LETTERS), BLOCK * length, dtype=np.uint8)]
    count = blk.hi - blk.lo
    data = letters[blk.lo * length : blk.hi * length]
    offsets = np.arange(0, (count + 1) * length, length, dtype=np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data))


def _choice(f: Field, column: int, blk: _Block) -> pa.Array:
    picks = _rng(blk, column).integers(0, len(f.args), BLOCK, dtype=np.int32)[blk.lo : blk.hi]
    if f.type == "STRING":
        return pa.array(f.args, pa.string()).take(pa.array(picks))
    return pa.array(np.asarray(f.args, dtype=_NUMPY_TYPES[f.type])[picks])


def _now(f: Field, column: int, blk: _Block) -> pa.Array:
    count = blk.hi - blk.lo
    if f.type == "DATE":
        return pa.array(np.full(count, blk.ts_ms // _DAY_MS, np.int32), pa.date32())
    return pa.array(np.full(count, blk.ts_ms * 1000, np.int64), _ARROW_TYPES["TIMESTAMP"])


_GENERATE = {"SEQUENCE": _sequence, "RANDOM": _random, "CHOICE": _choice, "NOW": _now}


def generate(fields: list[Field], schema: pa.Schema, blk: _Block) -> pa.RecordBatch:
    """The record batch of the block's rows [lo, hi)."""
    arrays = [_GENERATE[f.generator](f, c, blk) for c, f in enumerate(fields)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def blocks(start: int, end: int, seed: int, ts_ms: int) -> Iterator[_Block]:
    """The blocks covering rows [start, end), each cut to the rows asked for."""
    if end <= start:
        return
    for index in range(start // BLOCK, (end - 1) // BLOCK + 1):
        base = index * BLOCK
        yield _Block(seed, index, max(start, base) - base, min(end, base + BLOCK) - base, ts_ms)


# ---------------------------------------------------------------------------------------------
# Spark: options, data source, stream reader
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    fields: tuple[Field, ...]
    total: int | None = None
    rate: float | None = None
    per_batch: int = 1_000_000
    seed: int = 0
    tasks: int = 1


_MINIMUM = {"rows.total": 0, "rows.per.batch": 1, "tasks.max": 1}


def read_settings(options: Mapping[str, Any]) -> Settings:
    """Settings from Spark's (string) options; ValidationError naming a bad option."""
    lowered = {str(k).lower(): v for k, v in options.items() if v is not None}
    values = {}
    for spec in (*OPTIONS.values(), _TASKS):
        value = (
            coerce(spec, lowered[spec.name], "datagen") if spec.name in lowered else spec.default
        )
        if value is not None and spec.name in _MINIMUM and value < _MINIMUM[spec.name]:
            raise ValidationError(
                f"datagen: option '{spec.name}' must be at least {_MINIMUM[spec.name]}, got {value}"
            )
        values[spec.name] = value
    if values["rows.per.second"] is not None and not values["rows.per.second"] > 0:
        raise ValidationError("datagen: option 'rows.per.second' must be more than 0")
    return Settings(
        tuple(parse_fields(values["fields"])),
        values["rows.total"],
        values["rows.per.second"],
        values["rows.per.batch"],
        values["seed"],
        values["tasks.max"],
    )


def _offset(seq: int, ts_ms: int) -> dict:
    return {"seq": seq, "ts": ts_ms}  # fixed key order: Spark compares offsets as JSON text


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class SeqRange(InputPartition):
    """Rows [start, end) of a micro-batch planned at ts (epoch ms, the value of NOW)."""

    start: int
    end: int
    ts: int


class DatagenStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"seq": rows before this point, "ts": planning time in epoch ms}."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.arrow_schema = arrow_schema(list(settings.fields))
        self.clock = time.monotonic
        self.available_now = False
        self._anchor: tuple[float, int] | None = None  # (clock, seq) of the first latestOffset

    def initialOffset(self) -> dict:
        return _offset(0, 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        if self.settings.total is None:
            raise ValidationError(
                "datagen with run = 'once' needs rows.total (an unbounded generator never finishes)"
            )
        self.available_now = True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        seq = start["seq"]
        end = self._end(seq, limit)
        while end <= seq and self._must_wait(seq):  # available-now ends at the first empty batch
            self._sleep_until(seq + 1)
            end = self._end(seq, limit)
        return start if end <= seq else _offset(end, _wall_ms())

    def reportLatestOffset(self) -> dict | None:
        return None if self.settings.total is None else _offset(self.settings.total, 0)

    def partitions(self, start: dict, end: dict) -> list[SeqRange]:
        low, high = start["seq"], end["seq"]
        count = min(self.settings.tasks, high - low)
        if count <= 0:
            return []
        bounds = [low + (high - low) * i // count for i in range(count + 1)]
        return [SeqRange(a, b, end["ts"]) for a, b in pairwise(bounds)]

    def read(self, partition: SeqRange) -> Iterator[pa.RecordBatch]:
        fields = list(self.settings.fields)
        for blk in blocks(partition.start, partition.end, self.settings.seed, partition.ts):
            yield generate(fields, self.arrow_schema, blk)

    def commit(self, end: dict) -> None:
        pass

    def _end(self, seq: int, limit: ReadLimit) -> int:
        """The highest end the limit, rows.total and the pace allow (may be <= seq)."""
        total = self.settings.total
        if isinstance(limit, ReadMaxRows):
            end = seq + limit.max_rows
        elif isinstance(limit, ReadAllAvailable) and total is not None:
            end = total
        else:
            end = seq + self.settings.per_batch
        if total is not None:
            end = min(end, total)
        return end if self.settings.rate is None else min(end, self._paced(seq))

    def _paced(self, seq: int) -> int:
        now = self.clock()
        if self._anchor is None:
            self._anchor = (now, seq)
        since, first = self._anchor
        return first + math.floor((now - since) * self.settings.rate)

    def _must_wait(self, seq: int) -> bool:
        s = self.settings
        return self.available_now and s.rate is not None and s.total is not None and seq < s.total

    def _sleep_until(self, seq: int) -> None:
        since, first = self._anchor
        time.sleep(max(0.0, since + (seq - first) / self.settings.rate - self.clock()) + 0.001)


class DatagenDataSource(DataSource):
    """`spark.readStream.format("connectql_datagen")`: options as in OPTIONS plus tasks.max."""

    @classmethod
    def name(cls) -> str:
        return "connectql_datagen"

    def schema(self) -> StructType:
        return spark_schema(parse_fields(self.options.get("fields")))

    def streamReader(self, schema: StructType) -> DatagenStreamReader:
        settings = read_settings(self.options)
        expected = spark_schema(list(settings.fields))
        if [(f.name, f.dataType) for f in schema] != [(f.name, f.dataType) for f in expected]:
            raise ValidationError(
                f"datagen: the schema given ({schema.simpleString()}) differs"
                f" from the fields ({schema_ddl(list(settings.fields))})"
            )
        return DatagenStreamReader(settings)


def plan_source(opts: dict[str, Any]) -> ReaderSpec:
    """The reader of a datagen source connector, from its validated options."""
    if opts["run"] == "once" and opts.get("rows.total") is None:
        raise ValidationError(
            "datagen with run = 'once' needs rows.total (an unbounded generator never finishes)"
        )
    if opts["errors.tolerance"] == "all":
        raise ValidationError(
            "datagen refuses errors.tolerance = 'all': it makes every row itself from its"
            " fields, so it never meets a bad record and a dead-letter stream would stay empty"
        )
    keys = ("fields", "rows.total", "rows.per.second", "rows.per.batch", "seed", "tasks.max")
    spark_options = {k: str(opts[k]) for k in keys if opts.get(k) is not None}
    read_settings(spark_options)  # a bad fields spec or bound fails here, at CREATE
    return ReaderSpec(
        "connectql_datagen",
        spark_options,
        schema=schema_ddl(parse_fields(opts.get("fields"))),
        lag_field="seq",
        total_rows=opts.get("rows.total"),
    )


PLUGIN = Plugin(
    type="datagen",
    doc="Generated rows (like Flink's datagen): a sequence plus random, choice and time columns;"
    " deterministic per seed, so a replayed micro-batch is identical.",
    source_options={**SOURCE_COMMON, **OPTIONS},
    plan_source=plan_source,
)
