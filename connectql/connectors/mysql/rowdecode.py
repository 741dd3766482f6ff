"""Our decoder of the rows of binlog row events (write, update, delete) for the column types of
most tables. mysql-replication reads each value through several calls and builds a dict per row
(10-30k rows/s); this walks an event's bytes once, with a reader per column made once per table
map. It gives the very values mysql-replication gives (tests/test_rowdecode.py compares both on
every type); an event of a table with a type it does not read (TIME, BIT, SET, JSON, GEOMETRY,
the pre-5.6 temporal formats, a key's raw DATETIME) is left to mysql-replication."""

from __future__ import annotations

import codecs
import datetime
import decimal
import struct
from collections.abc import Callable

from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent

Reader = Callable[[bytes, int], tuple]  # (buffer, position) -> (value, next position)
COMPRESSED = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]  # bytes of a decimal's leftover digits
FSP_BYTES = [0, 1, 1, 2, 2, 3, 3]
EXACT = decimal.Context(prec=100)  # DECIMAL holds 65 digits: scaled without rounding
UNREAD = object()  # a table map with a column type this decoder leaves to mysql-replication


class Image(list):
    """A row image: its values in its table's column order (`names`), read as a mapping too
    (get, keys, items) where a dict of values is expected."""

    __slots__ = ("names", "index")

    def __init__(self, values: list, names: tuple, index: dict[str, int]):
        super().__init__(values)
        self.names, self.index = names, index

    def get(self, name: str, default=None):
        at = self.index.get(name)
        return default if at is None else self[at]

    def keys(self):
        return self.names

    def items(self):
        return zip(self.names, self, strict=True)


def rows(ev) -> list[tuple[Image, Image | None]] | None:
    """(values, before values) of each row of row event `ev`, or None when this decoder does
    not read its table's types (mysql-replication then decodes it: nothing was read)."""
    if ev.event_type == BINLOG.PARTIAL_UPDATE_ROWS_EVENT:
        return None
    table = ev.table_map[ev.table_id]
    readers = getattr(table, "_cq_readers", None)
    if readers is None:
        readers = table._cq_readers = _readers(table.columns)
    if readers is UNREAD or ev.number_of_columns != len(table.columns):
        return None
    if not ev.complete:
        return []
    names = tuple(c.name for c in table.columns)
    index = {n: i for i, n in enumerate(names)}
    data = ev.packet.read(ev.event_size - ev.packet.read_bytes)
    if isinstance(ev, UpdateRowsEvent):
        before, after = ev.columns_present_bitmap, ev.columns_present_bitmap2
        return _updates(data, (names, index), readers, before, after)
    present = _present(ev.columns_present_bitmap, len(names))
    out, pos, end = [], 0, len(data)
    while pos < end:
        values, pos = _image(data, pos, (names, index), readers, present)
        out.append((values, None))
    return out


def _updates(data: bytes, names, readers, before_bits: bytes, after_bits: bytes) -> list:
    count = len(names[0])
    before, after = _present(before_bits, count), _present(after_bits, count)
    out, pos, end = [], 0, len(data)
    while pos < end:
        old, pos = _image(data, pos, names, readers, before)
        new, pos = _image(data, pos, names, readers, after)
        out.append((new, old))
    return out


def _present(bitmap: bytes, count: int) -> list[bool]:
    return [bool(bitmap[i >> 3] & (1 << (i & 7))) for i in range(count)]


def _image(data: bytes, pos: int, names: tuple, readers, present) -> tuple[Image, int]:
    """One row image: its null bitmap (a bit per column present), then each present value.
    `names`: (column names, their index)."""
    width = (sum(present) + 7) >> 3
    nulls = data[pos : pos + width]
    pos += width
    values = []
    append = values.append
    if not any(nulls) and all(present):  # every column, none NULL: the common row
        for read in readers:
            value, pos = read(data, pos)
            append(value)
        return Image(values, *names), pos
    j = 0
    for read, here in zip(readers, present, strict=True):
        if not here:
            append(None)
            continue
        if nulls[j >> 3] & (1 << (j & 7)):
            append(None)
        else:
            value, pos = read(data, pos)
            append(value)
        j += 1
    return Image(values, *names), pos


# ------------------------------------------------------------------ a reader per column


def _readers(columns) -> list[Reader] | object:
    made = []
    for c in columns:
        if not c.name:
            return UNREAD
        read = _reader(c)
        if read is None:
            return UNREAD
        made.append(read)
    return made


INTS = {
    FIELD_TYPE.TINY: ("<b", "<B"),
    FIELD_TYPE.SHORT: ("<h", "<H"),
    FIELD_TYPE.LONG: ("<i", "<I"),
    FIELD_TYPE.LONGLONG: ("<q", "<Q"),
    FIELD_TYPE.FLOAT: ("<f", "<f"),
    FIELD_TYPE.DOUBLE: ("<d", "<d"),
}


def _reader(c) -> Reader | None:
    kind = c.type
    if kind in INTS:
        return _fixed(INTS[kind][1 if c.unsigned else 0])
    if kind == FIELD_TYPE.INT24:
        return _int24(not c.unsigned)
    if kind == FIELD_TYPE.YEAR:
        return lambda b, p: (b[p] + 1900, p + 1)
    if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _string(2 if c.max_length > 255 else 1, c.character_set_name)
    if kind == FIELD_TYPE.BLOB:
        return _string(c.length_size, c.character_set_name)
    if kind == FIELD_TYPE.NEWDECIMAL:
        return _decimal(c.precision, c.decimals)
    if kind == FIELD_TYPE.DATE:
        return _date
    if kind == FIELD_TYPE.DATETIME2:
        return _datetime2(c.fsp)
    if kind == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(c.fsp)
    if kind == FIELD_TYPE.ENUM:
        return _enum(c.size, c.enum_values)
    return None


def _fixed(fmt: str) -> Reader:
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)
    return lambda b, p: (unpack(b, p)[0], p + size)


def _int24(signed: bool) -> Reader:
    return lambda b, p: (int.from_bytes(b[p : p + 3], "little", signed=signed), p + 3)


def _string(size: int, charset: str | None) -> Reader:
    """A length (`size` bytes, little-endian), then the bytes: text decoded strictly in the
    column's character set (UTF-8 when the table map names none), bytes where Python knows no
    such encoding (binary; but '' for no bytes), as mysql-replication's __read_string."""
    encoding = RowsEvent.charset_to_encoding(charset) if charset is not None else "utf-8"
    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = None

    def read(b: bytes, p: int) -> tuple:
        length = int.from_bytes(b[p : p + size], "little")
        start = p + size
        raw = b[start : start + length]
        if encoding:
            return raw.decode(encoding), start + length
        return (raw or ""), start + length  # Python decodes b'' to '' without the codec

    return read


def _decimal(precision: int, decimals: int) -> Reader:
    """MySQL's packed DECIMAL: groups of 9 digits in 4 bytes, leftovers in fewer, the sign in
    the first bit and negative numbers stored inverted (mysql-replication's
    __read_new_decimal, step for step)."""
    integral = precision - decimals
    whole_int, whole_frac = integral // 9, decimals // 9
    left_int, left_frac = integral - whole_int * 9, decimals - whole_frac * 9
    head, tail = COMPRESSED[left_int], COMPRESSED[left_frac]
    size = head + 4 * (whole_int + whole_frac) + tail

    widths = [head] * bool(head) + [4] * (whole_int + whole_frac) + [tail] * bool(tail)
    scales = [10**left_int] * bool(head) + [10**9] * (whole_int + whole_frac)
    scales += [10**left_frac] * bool(tail)
    groups, shift = [], 8 * size
    for width, scale in zip(widths, scales, strict=True):  # (shift, mask, scale), left first
        shift -= 8 * width
        groups.append((shift, (1 << 8 * width) - 1, scale))
    sign, ones = 1 << (8 * size - 1), (1 << 8 * size) - 1

    def read(b: bytes, p: int) -> tuple:
        packed = int.from_bytes(b[p : p + size], "big")
        negative = not packed & sign  # stored with its bits inverted
        packed = (packed ^ ones ^ sign) if negative else (packed ^ sign)
        number = 0
        for at, mask, scale in groups:  # base 10**9 groups of digits
            number = number * scale + ((packed >> at) & mask)
        value = decimal.Decimal(number).scaleb(-decimals, EXACT)
        return (value.copy_negate() if negative else value), p + size

    return read


def _date(b: bytes, p: int) -> tuple:
    packed = int.from_bytes(b[p : p + 3], "little")
    year, month, day = packed >> 9, (packed >> 5) & 0xF, packed & 0x1F
    if not (year and month and day):  # the zero date, or a zero part: NULL
        return None, p + 3
    return datetime.date(year, month, day), p + 3


def _fraction(fsp: int) -> Callable[[bytes, int], int]:
    """The microseconds of a DATETIME2/TIMESTAMP2/TIME2's fractional part (`fsp` digits)."""
    size = FSP_BYTES[fsp]
    if not size:
        return lambda b, p: 0
    scale = 10 ** (6 - fsp)

    def micro(b: bytes, p: int) -> int:
        value = int.from_bytes(b[p : p + size], "big", signed=True)
        if fsp % 2:
            value = int(value / 10)
        return value * scale

    return micro


def _datetime2(fsp: int) -> Reader:
    micro, size = _fraction(fsp), 5 + FSP_BYTES[fsp]

    def read(b: bytes, p: int) -> tuple:
        packed = int.from_bytes(b[p : p + 5], "big")
        year_month = (packed >> 22) & 0x1FFFF
        fraction = micro(b, p + 5)
        try:
            value = datetime.datetime(
                year_month // 13, year_month % 13, (packed >> 17) & 0x1F,
                (packed >> 12) & 0x1F, (packed >> 6) & 0x3F, packed & 0x3F, max(fraction, 0),
            )  # fmt: skip
        except ValueError:  # a zero part: NULL, as mysql-replication reads it
            return None, p + size
        return value, p + size

    return read


def _timestamp2(fsp: int) -> Reader:
    micro, size = _fraction(fsp), 4 + FSP_BYTES[fsp]
    utc = datetime.datetime.utcfromtimestamp

    def read(b: bytes, p: int) -> tuple:
        value = utc(int.from_bytes(b[p : p + 4], "big", signed=True))
        fraction = micro(b, p + 4)
        return (value.replace(microsecond=fraction) if fraction > 0 else value), p + size

    return read


def _enum(size: int, members) -> Reader:
    def read(b: bytes, p: int) -> tuple:
        index = int.from_bytes(b[p : p + size], "little")
        return (members[index] if members else None), p + size

    return read
