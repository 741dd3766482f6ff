"""The datagen source on the connector toolkit: offsets {"seq": rows before, "ts": planning time
in epoch ms (the value of NOW)}; the toolkit paces it (rows.per.second) and stops it (run =
'once')."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pyarrow as pa

from connectql.config import Option, coerce
from connectql.connectors.datagen.fields import Field, arrow_schema, parse_fields, schema_ddl
from connectql.connectors.datagen.generate import blocks, generate
from connectql.errors import ValidationError
from connectql.toolkit import Source

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
_MINIMUM = {"rows.total": 0, "rows.per.batch": 1, "tasks.max": 1}


@dataclass(frozen=True)
class Settings:
    fields: tuple[Field, ...]
    total: int | None = None
    rate: float | None = None
    per_batch: int = 1_000_000
    seed: int = 0
    tasks: int = 1


def read_settings(options: Mapping[str, Any]) -> Settings:
    """Settings from the options (strings or values); ValidationError naming a bad option."""
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


class DatagenSource(Source):
    """Rows [start.seq, end.seq) of a batch, planned at end.ts, split into tasks.max ranges."""

    options = tuple(OPTIONS.values())
    lag_field = "seq"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.settings = read_settings(options)  # a bad fields spec or bound fails at CREATE

    def check(self) -> None:
        if self.options.get("errors.tolerance") == "all":
            raise ValidationError(
                "datagen refuses errors.tolerance = 'all': it makes every row itself from its"
                " fields, so it never meets a bad record and a dead-letter stream would stay empty"
            )

    def available_now(self) -> None:
        if self.settings.total is None:
            raise ValidationError(
                "datagen with run = 'once' needs rows.total (an unbounded generator never finishes)"
            )

    def schema(self) -> str:
        return schema_ddl(list(self.settings.fields))

    def arrow_schema(self) -> pa.Schema:
        return arrow_schema(list(self.settings.fields))

    def total_records(self) -> int | None:
        return self.settings.total

    def default_max_records(self) -> int:
        return self.settings.per_batch

    def records_per_second(self) -> float | None:
        return self.settings.rate

    def initial_offset(self) -> dict:
        return _offset(0, 0)

    def latest_offset(self, start: dict) -> dict:
        """rows.total; unbounded: rows.per.batch more (a generator always has rows)."""
        total = self.settings.total
        if total is None:
            return _offset(start["seq"] + self.settings.per_batch, _wall_ms())
        return start if start["seq"] >= total else _offset(total, _wall_ms())

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        most = min(max_records, self.settings.per_batch)
        end = min(latest["seq"], start["seq"] + most)
        return start if end <= start["seq"] else _offset(end, _wall_ms())

    def reported_latest(self, latest: dict) -> dict | None:
        total = self.settings.total
        return None if total is None else _offset(total, 0)

    def partitions(self, start: dict, end: dict) -> list[list[int]]:
        low, high = start["seq"], end["seq"]
        count = min(self.settings.tasks, high - low)
        if count <= 0:
            return []
        bounds = [low + (high - low) * i // count for i in range(count + 1)]
        return [[a, b, end["ts"]] for a, b in pairwise(bounds)]

    def read(self, partition: list[int]) -> Iterator[pa.RecordBatch]:
        """Rows [start, end) planned at ts, at most one block per batch."""
        start, end, ts = partition
        fields, schema = list(self.settings.fields), self.arrow_schema()
        for blk in blocks(start, end, self.settings.seed, ts):
            yield generate(fields, schema, blk)
