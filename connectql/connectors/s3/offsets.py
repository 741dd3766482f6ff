"""The s3 source's offsets: per object its ETag, size, records read and records held; how far a
micro-batch goes, and the ranges of records it reads."""

from __future__ import annotations

from dataclasses import dataclass

# An offset: {"objects": {key: {"etag", "size", "read", "total"}}, "done": objects read to the
# end, "bytes": their bytes}. Keys are in key order and fields in a fixed order: Spark compares
# offsets as JSON text.


def entry(etag: str, size: int, read: int, total: int) -> dict:
    return {"etag": etag, "size": size, "read": read, "total": total}


def offset(objects: dict[str, dict]) -> dict:
    ordered = {k: objects[k] for k in sorted(objects, key=str.encode)}
    finished = [e for e in ordered.values() if e["read"] >= e["total"]]
    return {
        "objects": ordered,
        "done": len(finished),
        "bytes": sum(e["size"] for e in finished),
    }


EMPTY = offset({})


@dataclass(frozen=True)
class Seen:
    """An object as the source found it: key, ETag, size and how many records it holds."""

    key: str
    etag: str
    size: int
    total: int


def advance(
    start: dict, found: list[Seen], budget: int | None, listed: set[str] | None = None
) -> dict:
    """The end offset after reading at most `budget` records (None: all) of the objects
    `found` (in key order), from `start`. An object under a known key with another ETag was
    replaced: it is read again from its first record. Entries of objects no longer `listed`
    (the keys under the prefix now; None: keep every entry) leave the offset, so that it holds
    at most the objects a listing finds; one uploaded again later under its key is new."""
    objects = {k: e for k, e in start["objects"].items() if listed is None or k in listed}
    left = budget
    for seen in found:
        known = objects.get(seen.key)
        read = known["read"] if known and known["etag"] == seen.etag else 0
        if known and read == known["total"] and known["etag"] == seen.etag:
            continue
        take = seen.total - read if left is None else min(seen.total - read, left)
        objects[seen.key] = entry(seen.etag, seen.size, read + take, seen.total)
        if left is not None:
            left -= take
            if left <= 0:
                break
    return offset(objects)


def unfinished(start: dict, key: str, etag: str) -> bool:
    """Whether records of this object remain to be read after `start`."""
    known = start["objects"].get(key)
    return known is None or known["etag"] != etag or known["read"] < known["total"]


@dataclass(frozen=True)
class Range:
    """Records [first, last) of one object version."""

    key: str
    etag: str
    first: int
    last: int


def ranges(start: dict, end: dict) -> list[Range]:
    """The records a batch from `start` to `end` reads, in key order."""
    found = []
    for key, e in end["objects"].items():
        before = start["objects"].get(key)
        first = before["read"] if before and before["etag"] == e["etag"] else 0
        if e["read"] > first:
            found.append(Range(key, e["etag"], first, e["read"]))
    return found


def split(found: list[Range], tasks: int) -> list[list[Range]]:
    """The ranges dealt into at most `tasks` groups of about equal records, each in key order."""
    groups: list[list[Range]] = [[] for _ in range(max(1, min(tasks, len(found))))]
    sizes = [0] * len(groups)
    for r in sorted(found, key=lambda r: r.first - r.last):  # largest first
        i = sizes.index(min(sizes))
        groups[i].append(r)
        sizes[i] += r.last - r.first
    return [sorted(g, key=lambda r: r.key.encode()) for g in groups if g]
