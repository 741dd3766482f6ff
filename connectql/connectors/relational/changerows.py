"""The change rows every cdc source emits (PostgreSQL, MySQL), built column by column in the
stream's types: the schema.change checks, an update that changes the key as a delete plus an
insert, the change-data columns, and those columns on snapshot rows."""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from connectql.errors import ConnectQLError, SchemaChanged, SchemaEvolved
from connectql.toolkit.envelope import META_COLUMNS, OP, POS, SOURCE, TS_MS, UNCHANGED
from connectql.toolkit.source import DeadLetter


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


class ChangeRows:
    """Collects change rows of `table` as the log decoded them, column by column (no object per
    row: a drain's millions of rows cost the garbage collector nothing), and converts each
    column at once when the batch is built: `fast(field, db_type, values)` may give the whole
    column as an Arrow array (None, or an error, where it cannot), else each value goes through
    `convert(value, field, types)` (`types`: as given to add). A value neither can read makes
    its row a dead letter (Changes), the rest of the batch goes on."""

    def __init__(self, schema: StructType, key, table: str, schema_change: str, convert, fast=None):
        self.key, self.table, self.schema_change = tuple(key), table, schema_change
        self.convert: Callable[[Any, StructField, dict], Any] = convert
        self.fast = fast
        self.arrow = arrow_schema(schema)
        self.data = [f for f in schema.fields if f.name not in META_COLUMNS]
        self.names = {f.name for f in self.data}
        self.meta_names = [n for n in schema.names if n in META_COLUMNS]
        self.columns: dict[str, list] = {f.name: [] for f in self.data}  # each row's value
        self.meta: dict[str, list] = {name: [] for name in META_COLUMNS}
        self.types: list[dict] = []  # each row's database types (one dict per table layout)
        self.distinct_types: list[dict] = []
        # each row's poison(error, row): its dead-letter record, row = (op, values, meta)
        self.poison: list[Callable[[Exception, tuple], dict] | None] = []
        self._layouts: dict[tuple, tuple] = {}

    @property
    def count(self) -> int:
        return len(self.types)

    def add(self, op: str, values: dict, before: dict | None, meta: dict, types=None,
            poison=None) -> None:  # fmt: skip
        """One change; `meta` holds __ts_ms, __pos and __source (and __unchanged); `types`
        names the database types of the values' columns (for messages); `poison(error, row)`:
        its dead-letter record."""
        types = types or {}
        if values.keys() != self.names:
            self._check_columns(op, values, types)
        if self.moved(op, values, before):
            self._row("d", before, meta, types, poison)  # the key changed: delete the old row
            self._row("c", values, meta, types, poison)
            return
        self._row(op, values, meta, types, poison)

    def moved(self, op: str, values, before) -> bool:
        """An update that changed the row's key: add() writes it as a delete and an insert."""
        return bool(
            op == "u" and before and self.key
            and [before.get(k) for k in self.key] != [values.get(k) for k in self.key]
        )  # fmt: skip

    def add_values(self, op: str, columns: tuple, values: list, types: dict, ts_ms: int,
                   pos: str, source: str, poison) -> None:  # fmt: skip
        """One change whose values come in the order of `columns` (a table's layout, the same
        tuple for each of its rows): insert, update that kept its key, or delete; no
        unchanged values."""
        layout = self._layouts.get((columns, op == "c"))
        if layout is None:
            layout = self._layout(op, columns, types)
        targets, missing = layout
        for buf, value in zip(targets, values, strict=True):
            buf.append(value)
        for buf in missing:
            buf.append(None)
        meta = self.meta
        meta[OP].append(op)
        meta[TS_MS].append(ts_ms)
        meta[POS].append(pos)
        meta[SOURCE].append(source)
        meta[UNCHANGED].append(None)
        self._typed(types)
        self.poison.append(poison)

    def layout(self, op: str, columns: tuple, types: dict) -> None:
        """schema.change's checks of changes of `op` whose values come in the order of
        `columns`, as add_values makes them (for rows made elsewhere, cdc's columnar path)."""
        if (columns, op == "c") not in self._layouts:
            self._layout(op, columns, types)

    def _layout(self, op: str, columns: tuple, types: dict) -> tuple:
        """The buffers `columns`' values go to (a column the stream lacks: discarded) and
        those of the stream's columns `columns` lacks, checked against schema.change once."""
        if set(columns) != self.names:
            self._check_columns(op, columns, types)
        targets = [self.columns.get(c, _DISCARD) for c in columns]
        missing = [buf for name, buf in self.columns.items() if name not in columns]
        self._layouts[columns, op == "c"] = layout = (targets, missing)
        return layout

    def _check_columns(self, op: str, values, types: dict) -> None:
        added = [c for c in values if c not in self.names]
        new = f"table {self.table} has new column(s) " + ", ".join(
            f"{c} ({types[c]})" if c in types else c for c in added
        )
        if added and self.schema_change == "evolve":
            raise SchemaEvolved(new)
        if added and self.schema_change == "fail":
            raise SchemaChanged(f"{new} that stream does not have (schema.change = 'fail')")
        if op == "c" and self.schema_change == "fail":
            dropped = [c for c in self.names if c not in values]
            if dropped:
                raise SchemaChanged(
                    f"column(s) {', '.join(dropped)} of table {self.table} were dropped"
                    " (schema.change = 'fail')"
                )

    def _row(self, op: str, values: dict, meta: dict, types: dict, poison) -> None:
        for name, buf in self.columns.items():
            buf.append(values.get(name))
        for name, buf in self.meta.items():
            buf.append(op if name == OP else meta.get(name))
        self._typed(types)
        self.poison.append(poison)

    def _typed(self, types: dict) -> None:
        if not self.types or types is not self.types[-1]:
            self.distinct_types.append(types)
        self.types.append(types)

    def row(self, i: int) -> tuple[str, dict, dict]:
        """Row i as (op, values by column, meta)."""
        values = {name: buf[i] for name, buf in self.columns.items()}
        meta = {name: buf[i] for name, buf in self.meta.items() if name != OP}
        return self.meta[OP][i], values, meta

    def batch(self, unreadable: Callable[[dict], None] | None = None) -> pa.RecordBatch:
        """The rows as a batch; each row with a value that cannot be read is handed to
        `unreadable` as its dead-letter record (without it: the error is raised) and left out."""
        bad: dict[int, Exception] = {}
        arrays = {f.name: self._column(f, bad) for f in self.arrow if f.name in self.names}
        for name in self.meta_names:
            arrays[name] = pa.array(self.meta[name], self.arrow.field(name).type)
        batch = pa.RecordBatch.from_arrays([arrays[f.name] for f in self.arrow], schema=self.arrow)
        if not bad:
            return batch
        for i in sorted(bad):
            if unreadable is None or self.poison[i] is None:
                raise bad[i]
            unreadable(self.poison[i](bad[i], self.row(i)))
        return batch.filter(pa.array([i not in bad for i in range(self.count)]))

    def _column(self, f: pa.Field, bad: dict[int, Exception]) -> pa.Array:
        field = next(d for d in self.data if d.name == f.name)
        raw = self.columns[f.name]
        if self.fast is not None:
            db_type = self._db_type(f.name)
            if db_type is not None:
                try:
                    fast = self.fast(field, db_type, raw)
                except (*UNREADABLE, TypeError, OverflowError):
                    fast = None  # a value the fast path does not take: each on its own
                if fast is not None:
                    return fast
        values = []
        for i, (value, types) in enumerate(zip(raw, self.types, strict=True)):
            try:
                values.append(None if i in bad else self.convert(value, field, types))
            except UNREADABLE as e:
                bad.setdefault(i, e)
                values.append(None)
        try:
            return pa.array(values, f.type)
        except (pa.ArrowException, TypeError, OverflowError):
            return self._each(values, f.type, bad)

    def _db_type(self, name: str) -> str | None:
        """The database type of a column, when every row says the same."""
        found = {t.get(name) for t in self.distinct_types}
        return found.pop() if len(found) == 1 else None

    @staticmethod
    def _each(values: list, type_: pa.DataType, bad: dict[int, Exception]) -> pa.Array:
        """A column that Arrow refused as a whole: the rows whose value it refuses are bad."""
        for i, value in enumerate(values):
            try:
                pa.array([value], type_)
            except (pa.ArrowException, TypeError, OverflowError) as e:
                bad.setdefault(i, ValueError(f"{value!r} does not fit {type_}: {e}"))
                values[i] = None
        return pa.array(values, type_)


class _Discard:
    """Where the values of a column the stream does not take go (schema.change = 'ignore')."""

    def append(self, _value) -> None:
        pass


_DISCARD = _Discard()


# what converting a value that does not fit raises (a schema change raises other errors)
UNREADABLE = (ValueError, ArithmeticError, LookupError, UnicodeError, pa.ArrowException)
CANNOT_READ = "errors.tolerance = 'all' sends it to the dead-letter stream and goes on"


def cannot_read(table: str | None, message: str, hint: str) -> ConnectQLError:
    """The error of a value that cannot be read (errors.tolerance = 'none'), by default."""
    return ConnectQLError(f"{message} ({hint})")


def dead_letter(record: dict) -> DeadLetter:
    """A change or range a source could not read (its record: table, offset, error_class,
    error_message, raw_record) as the toolkit's dead letter."""
    raw = record.get("raw_record")
    return DeadLetter(
        raw
        if raw is None or isinstance(raw, str)
        else json.dumps(raw, sort_keys=True, default=str),
        record.get("error_message") or "",
        record.get("offset"),
        record.get("error_class") or "UNREADABLE",
    )


class Changes:
    """The change rows of several tables (`rows`: a ChangeRows by table), and the changes that
    cannot be read: each fails the read with `fail(table, message, hint)` (default: a
    ConnectQLError), or when `tolerant` becomes a dead letter, yielded after every table's rows."""

    def __init__(self, rows: dict[str, ChangeRows], tolerant: bool = False, fail=None):
        self.rows, self.tolerant, self.fail = rows, tolerant, fail or cannot_read
        self.dead: list[dict] = []

    def add(self, table: str, op, values, before, meta, types, poison) -> None:
        """One change of `table` (ChangeRows.add); `poison(error)`: the dead-letter record of
        a change that cannot be read, with its 'table' and 'error_message'."""
        self.rows[table].add(op, values, before, meta, types, poison)

    def unreadable(self, record: dict) -> None:
        """A change that cannot be read, as its dead-letter record: fail, or keep it."""
        if not self.tolerant:
            raise self.fail(record["table"], record["error_message"], CANNOT_READ) from None
        self.dead.append(record)

    def batches(
        self, made: dict[str, pa.RecordBatch] | None = None
    ) -> Iterator[tuple[str, pa.RecordBatch] | DeadLetter]:
        """(table, change rows) of each table that changed, then the dead letters. `made`:
        change rows of some tables made elsewhere (in their streams' schemas, in log order),
        merged with theirs here in __pos order (stable: a key change's delete and insert stay
        in their order)."""
        made = made or {}
        for table, built in self.rows.items():
            parts = [made[table]] if table in made and made[table].num_rows else []
            if built.count:
                batch = built.batch(self.unreadable)
                if batch.num_rows:
                    parts.append(batch)
            if len(parts) > 1:
                batch = pa.concat_batches(parts)
                if POS in batch.schema.names:
                    batch = batch.take(pc.sort_indices(batch, [(POS, "ascending")]))
                yield table, batch
            elif parts:
                yield table, parts[0]
        yield from map(dead_letter, self.dead)


def with_snapshot_columns(
    batch: pa.RecordBatch, schema: StructType, pos: str, source: str
) -> pa.RecordBatch:
    """Snapshot rows: `__op = 'r'`, read now, at position `pos` (before every later change)."""
    n = batch.num_rows
    meta = {
        "__op": pa.array(["r"] * n, pa.string()),
        "__ts_ms": pa.array([time.time_ns() // 1_000_000] * n, pa.int64()),
        "__pos": pa.array([pos] * n, pa.string()),
        "__source": pa.array([source] * n, pa.string()),
        "__unchanged": pa.nulls(n, pa.string()),
    }
    target = arrow_schema(schema)
    arrays = [meta[f.name] if f.name in meta else batch.column(f.name) for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


@contextlib.contextmanager
def collector_paused():
    """Python's cycle collector off while a batch's changes are read: each of a batch's
    millions of values (Decimal, datetime, a row's list) sets off its walks over every live
    object (a fifth of a binlog read's time), and change rows make no reference cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
