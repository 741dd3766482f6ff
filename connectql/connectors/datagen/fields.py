"""datagen's fields spec: 'name TYPE [GENERATOR[(args)]], ...' parsed into Fields, with errors
that name the column and the position."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, NoReturn

import pyarrow as pa

from connectql.config import suggest
from connectql.errors import ValidationError

DEFAULT_FIELDS = (
    "id BIGINT SEQUENCE, user_id INT RANDOM(1, 1000), amount DOUBLE RANDOM(0, 500),"
    " status STRING CHOICE('new','paid','shipped','cancelled'), name STRING RANDOM(8),"
    " created_at TIMESTAMP NOW"
)

MAX_STRING_LENGTH = 1024

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


ARROW_TYPES = {
    "BIGINT": pa.int64(),
    "INT": pa.int32(),
    "DOUBLE": pa.float64(),
    "STRING": pa.string(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}


def arrow_schema(fields: list[Field]) -> pa.Schema:
    return pa.schema([pa.field(f.name, ARROW_TYPES[f.type]) for f in fields])
