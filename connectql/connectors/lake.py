"""What the table-format sinks (delta, iceberg) share: the mode (append, or a change stream
upserted by key), the columns a table gets, each key's last change of a batch, and the S3 server
a table on `s3://` is reached through."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from connectql.config import Option
from connectql.connectors.s3.options import STORE_OPTIONS
from connectql.connectors.s3.store import server_of
from connectql.toolkit import ValidationError
from connectql.toolkit.envelope import META_COLUMNS, OP, POS
from connectql.toolkit.messages import MESSAGE_COLUMNS
from connectql.toolkit.sink import own_trigger

MODE_OPTIONS = (
    Option(
        "mode",
        "enum",
        choices=("append", "upsert"),
        doc="append: every row is added; upsert: a change stream applied by its key (updates,"
        " inserts, deletes); default: upsert when the stream has a key, else append",
    ),
    Option("key", doc="the columns a row is matched by in upsert mode (default: the stream's key)"),
)


COMMIT_OPTIONS = (
    Option(
        "commit.interval.ms",
        "int",
        doc="commit at most this often: a micro-batch (one table commit) starts at most every"
        " this many ms, so small changes gather into fewer, larger files; absent: a commit as"
        " fast as records arrive. Sets the sink's trigger, so it cannot be given with"
        " trigger.interval",
    ),
    Option(
        "compact.every",
        "int",
        doc="after every this many micro-batches, rewrite the table's small files into large"
        " ones (delta: OPTIMIZE compact; iceberg: the table rewritten in one overwrite that"
        " keeps the batch record); absent: never",
    ),
)
S3_OPTIONS = tuple(o for name, o in STORE_OPTIONS.items() if name != "bucket")


class Store:
    """The S3 server of a table whose location is an s3:// URL (the s3 connector's endpoint,
    region and keys), as each library takes it; nothing for a local path."""

    def __init__(self, options: dict, location: str, who: str):
        self.remote = location.startswith(("s3://", "s3a://"))
        given = [o.name for o in S3_OPTIONS if options.get(o.name)]
        if given and not self.remote:
            raise ValidationError(
                f"{who}: {', '.join(given)} {'is' if len(given) == 1 else 'are'} for an s3://"
                f" location, and {location!r} is not one"
            )
        self.endpoint, self.region, self.access, self.secret = server_of(options, who)

    def delta(self) -> dict[str, str]:
        """delta-rs's storage_options."""
        if not self.remote:
            return {}
        found = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region or "us-east-1",
            "AWS_ACCESS_KEY_ID": self.access,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_ALLOW_HTTP": "true" if (self.endpoint or "").startswith("http://") else None,
        }
        return {k: v for k, v in found.items() if v}

    def iceberg(self) -> dict[str, str]:
        """pyiceberg's FileIO properties."""
        if not self.remote:
            return {}
        found = {
            "s3.endpoint": self.endpoint,
            "s3.region": self.region or "us-east-1",
            "s3.access-key-id": self.access,
            "s3.secret-access-key": self.secret,
        }
        return {k: v for k, v in found.items() if v}


def starting_option(unit: str) -> Option:
    """A lake source's starting.position, its table's commits called `unit` (versions)."""
    return Option(
        "starting.position",
        "enum",
        "earliest",
        choices=("earliest", "latest"),
        doc=f"earliest: the table's rows as they are first, then what later {unit} append;"
        f" latest: only what {unit} committed after the connector starts append",
    )


def commit_interval(options: dict, who: str) -> int | None:
    """The sink's micro-batch pace from commit.interval.ms (None: as fast as records arrive)."""
    return own_trigger(options, "commit.interval.ms", who, "it commits")


def compacts_after(options: dict, batch_id: int, who: str) -> bool:
    """Whether the table is compacted after writing batch `batch_id` (compact.every)."""
    every = options.get("compact.every")
    if every is not None and every < 1:
        raise ValidationError(f"{who}: compact.every must be at least 1")
    return every is not None and (batch_id + 1) % every == 0


class Layout:
    """A table sink's mode and key, from its options and its stream's key."""

    def __init__(self, options: dict, stream_key: tuple[str, ...]):
        given = options.get("key")
        self.key = [c.strip() for c in given.split(",") if c.strip()] if given else list(stream_key)
        self.mode = options.get("mode") or ("upsert" if self.key else "append")

    def check(self, schema: pa.Schema, where: str) -> None:
        if self.mode != "upsert":
            return
        if not self.key:
            raise ValidationError(f"{where}: mode = 'upsert' needs a key (key = '...')")
        missing = [c for c in self.key if c not in schema.names]
        if missing:
            raise ValidationError(f"{where}: key column {', '.join(missing)} is not in the stream")

    def written(self, schema: pa.Schema) -> pa.Schema:
        """The table's columns (no field metadata): an upsert leaves the change and message
        columns out."""
        left_out = {*META_COLUMNS, *MESSAGE_COLUMNS} if self.mode == "upsert" else set()
        return pa.schema(
            [pa.field(f.name, f.type, f.nullable) for f in schema if f.name not in left_out]
        )

    def changes(self, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
        """An upsert batch as (each key's last change, its live rows: those not deleted, in
        the table's columns)."""
        last = last_per_key(rows, self.key)
        live = (
            last.filter(pc.invert(pc.fill_null(pc.equal(last.column(OP), "d"), False)))
            if OP in last.schema.names
            else last
        )
        return last, live.select(self.written(rows.schema).names).cast(self.written(rows.schema))


def last_per_key(rows: pa.Table, key: list[str]) -> pa.Table:
    """Each key's last change of the batch (by __pos, else row order)."""
    numbered = rows.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    order = "__row"
    if POS in rows.schema.names:
        order = "__pos_order"
        ranks = pc.rank(numbered.column(POS), sort_keys="ascending", tiebreaker="first")
        numbered = numbered.append_column(order, ranks)
    # joined on the keys and order alone: a join takes no nested column (a list, a map)
    narrow = numbered.select([*key, order, "__row"] if order != "__row" else [*key, order])
    last = narrow.group_by(key, use_threads=False).aggregate([(order, "max")])
    picked = narrow.join(last.rename_columns([*key, order]), keys=[*key, order], join_type="inner")
    kept = picked.column("__row")
    return rows.take(pc.take(kept, pc.sort_indices(kept)))  # in the batch's order
