"""What every database sink shares (PostgreSQL now, MySQL later): its settings, which columns
reach the target, staging-table names, and the order that picks the last change per key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connectql.connectors.options import from_spark_options, to_spark_options
from connectql.errors import PlanError

META_COLUMNS = ("__op", "__ts_ms", "__pos", "__source")  # change-data columns (DESIGN.md)
SEQ_COLUMN = "__cq_seq"  # a staged row's place in the batch: partition << 40 | row number
PROGRESS_TABLE = "connectql_sink_progress"


@dataclass(frozen=True)
class SinkSettings:
    """A database sink's settings as they travel through Spark's writer options (strings)."""

    connection: dict[str, Any]
    schema: str
    table: str
    mode: str  # 'append' | 'upsert'
    key: tuple[str, ...]
    delete_enabled: bool
    auto_create: bool
    auto_evolve: bool = True
    writer_id: str = ""
    connector: str = ""
    deadletter: str | None = None  # dead-letter stream path (errors.tolerance = 'all')

    def to_options(self) -> dict[str, str]:
        body = {
            "connection": self.connection,
            "schema": self.schema,
            "table": self.table,
            "mode": self.mode,
            "key": list(self.key),
            "delete_enabled": self.delete_enabled,
            "auto_create": self.auto_create,
            "auto_evolve": self.auto_evolve,
        }
        return to_spark_options(body)

    @classmethod
    def from_options(cls, options: dict[str, str]) -> SinkSettings:
        body = from_spark_options(options)
        return cls(
            connection=body["connection"],
            schema=body["schema"],
            table=body["table"],
            mode=body["mode"],
            key=tuple(body["key"]),
            delete_enabled=body["delete_enabled"],
            auto_create=body["auto_create"],
            auto_evolve=body.get("auto_evolve", True),
            writer_id=options.get("connectql.writer", ""),
            connector=options.get("connectql.connector", ""),
            deadletter=options.get("connectql.deadletter") or None,
        )


def sink_mode(opts: dict[str, Any], stream_key: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(mode, key): upsert when the stream has a key or primary.key is given, else append."""
    given = tuple(k.strip() for k in (opts.get("primary.key") or "").split(",") if k.strip())
    key = given or tuple(stream_key)
    mode = opts.get("mode") or ("upsert" if key else "append")
    if mode == "upsert" and not key:
        raise PlanError(
            "mode = 'upsert' needs a key: the stream has none, so give primary.key = 'col, ...'"
        )
    return mode, key


def target_columns(names: list[str], mode: str) -> list[str]:
    """The columns written to the target: an upsert keeps the row, not its change metadata."""
    if mode == "append":
        return list(names)
    return [n for n in names if n not in META_COLUMNS]


def staged_columns(names: list[str], mode: str) -> list[str]:
    """The columns a batch stages: the target's, plus what an upsert orders and deletes by."""
    keep = [c for c in ("__op", "__pos") if c in names] if mode == "upsert" else []
    return target_columns(names, mode) + keep


def check_columns(names: list[str], s: SinkSettings, where: str) -> None:
    missing = [k for k in s.key if k not in names]
    if missing:
        raise PlanError(
            f"{where}: key column {', '.join(missing)} is not in the stream's columns"
            f" ({', '.join(names)})"
        )


def deadletter_name(writer_id: str, batch_id: int) -> str:
    """The file of a batch's rejected rows in the dead-letter stream (one per batch, once)."""
    return f"{writer_id}-b{batch_id}-rejected"


def stage_name(writer_id: str, batch_id: int, partition: int) -> str:
    return f"cq_stage_{writer_id}_{batch_id}_{partition}"


def change_order(names: list[str]) -> list[str]:
    """Columns ordering a key's changes oldest to newest: the source's log position, then the
    row's place in the stream."""
    return (["__pos"] if "__pos" in names else []) + [SEQ_COLUMN]


def has_deletes(names: list[str], s: SinkSettings) -> bool:
    return s.mode == "upsert" and s.delete_enabled and "__op" in names
