"""datagen's generation: row k of column c comes from block k // BLOCK, seeded by (seed, c,
block), so every value is a pure function of (seed, k, column) and replays are identical."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from connectql.connectors.datagen.fields import ARROW_TYPES, Field

BLOCK = 65_536  # rows per random block: the unit of generation and the largest batch read() yields
_MASK64 = (1 << 64) - 1
_DAY_MS = 86_400_000
_NUMPY_TYPES = {"BIGINT": np.int64, "INT": np.int32, "DOUBLE": np.float64}


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
    return pa.array(np.full(count, blk.ts_ms * 1000, np.int64), ARROW_TYPES["TIMESTAMP"])


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
