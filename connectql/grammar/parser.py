"""Parse connector-language scripts into the dataclasses of `ast.py` (lark LALR, contextual lexer);
errors are `ParseError`s with line and column in the coordinates of the whole script."""

from __future__ import annotations

import re
from copy import copy
from functools import lru_cache
from importlib import resources

import sqlglot
from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.parsers.lalr_parser_state import ParserState
from sqlglot import exp

from connectql.config import MASK, is_secret_key
from connectql.errors import ParseError
from connectql.grammar.ast import (
    AlterConnector,
    AlterStream,
    ConnectorAction,
    CreateSecret,
    CreateSinkConnector,
    CreateSourceConnector,
    CreateStream,
    Describe,
    Drop,
    Explain,
    SecretRef,
    Select,
    Set,
    Show,
    SnapshotTables,
    Statement,
)

__all__ = ["parse_script", "parse_statement"]

# How expected terminals are named in error messages (keywords are named by themselves).
_READABLE = {
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "EQUAL": "'='",
    "NAME": "name",
    "WORD": "word",
    "STRING": "string",
    "NUMBER": "number",
    "REF": "${env:..}",
    "SELECT_SQL": "SELECT",
    "WITH_SQL": "WITH",
    "SELECT_BODY": "SELECT ... WITH (...)",
    "$END": "end of statement",
}

# A script, scanned for `;` that end statements (quotes and comments are skipped over).
_SCAN = re.compile(
    r"""
      (?P<code>'[^']*'|"[^"]*"|`[^`]*`|[^'"`;\-/\s]+|-(?!-)|/(?!\*))
    | (?P<skip>--[^\n]*|/\*.*?\*/|\s+)
    | (?P<semi>;)
    | (?P<bad>.)
    """,
    re.S | re.X,
)


# What an error quotes when no token could be read: the word-like run there, or one character.
_WORDISH = re.compile(r"[A-Za-z0-9_.\-]+|.", re.S)
# A syntax error does not quote what may be a secret: text in a CREATE SECRET, or after a key
# whose values are secret (a key as a word or quoted, maybe followed by '=').
_CREATE_SECRET = re.compile(r"\s*create\s+secret\b", re.IGNORECASE)
_LAST_WORD = re.compile(r"""([\w.\-]+|'[^']*'|"[^"]*")\s*=?\s*$""")
_MASKED = f"'{MASK}'"


class _Error(Exception):
    """A semantic error found while building a statement, in statement coordinates."""

    def __init__(self, message: str, line: int, column: int):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


# ---- building dataclasses from the parse ---------------------------------------------------------


def _unquote(token: str) -> str:
    quote = token[0]
    return token[1:-1].replace(quote * 2, quote)


def _fields(items: list) -> dict:
    """Rule children are (field, value) pairs or lists of them; keyword tokens are dropped."""
    pairs = [item for item in items if isinstance(item, tuple)]
    pairs += [pair for item in items if isinstance(item, list) for pair in item]
    return dict(pairs)


class _Build(Transformer):
    """Turns the parse tree into statements, bottom-up, while the LALR parser reduces."""

    def start(self, items):
        return items[0]

    # -- small pieces

    def name(self, items):
        return ("name", str(items[0]))

    def if_not_exists(self, _):
        return ("if_not_exists", True)

    def if_exists(self, _):
        return ("if_exists", True)

    def source_type(self, items):
        return ("type", items[1][1])

    sink_type = source_type

    def into_stream(self, items):
        return ("stream", items[1][1])

    from_stream = into_stream

    def string(self, items):
        return ("string", _unquote(items[0]))

    def key(self, items):
        token = items[0]
        return _unquote(token) if token.type == "STRING" else str(token), token

    def string_value(self, items):
        return _unquote(items[0])

    def number_value(self, items):
        text = str(items[0])
        return float(text) if any(c in text for c in ".eE") else int(text)

    def word_value(self, items):
        text = str(items[0])
        return {"true": True, "false": False}.get(text.lower(), text)

    def ref_value(self, items):
        return str(items[0])

    def secret_value(self, items):
        return SecretRef(str(items[1]))

    def option(self, items):
        (key, token), value = items
        return key.lower(), value, token

    def option_list(self, items):
        options: dict = {}
        for key, value, token in items:
            if key in options:
                raise _Error(f"duplicate option {key!r}", token.line, token.column)
            options[key] = value
        return ("options", options)

    def options(self, items):
        return items[1]

    def select_body(self, items):
        token = items[0]
        sql = str(token).strip()
        return [("select", sql), ("stream", _select_stream(sql, token))]

    # -- statements

    # WITH may be left out (a connector whose options all have defaults, e.g. datagen)
    def create_source(self, items):
        return CreateSourceConnector(
            **{"type": None, "stream": None, "options": {}, **_fields(items)}
        )

    def create_sink(self, items):
        return CreateSinkConnector(
            **{"type": None, "stream": None, "options": {}, **_fields(items)}
        )

    create_sink_select = create_sink

    def create_stream(self, items):
        return CreateStream(**_fields(items))

    def create_secret(self, items):
        fields = _fields(items)
        return CreateSecret(value=fields.pop("string"), **fields)

    def show_connectors(self, items):
        return Show("connectors", like=_fields(items).get("string"))

    def show_streams(self, _):
        return Show("streams")

    def show_plugins(self, _):
        return Show("plugins")

    def show_secrets(self, _):
        return Show("secrets")

    def show_settings(self, _):
        return Show("settings")

    def describe_what(self, items):
        return ("what", str(items[0]).lower())

    drop_what = describe_what

    def describe(self, items):
        return Describe(**_fields(items))

    def action_verb(self, items):
        return ("action", str(items[0]).lower())

    def action(self, items):
        return ConnectorAction(**_fields(items))

    def reset(self, items):
        return ConnectorAction("reset_offsets", _fields(items)["name"])

    def alter(self, items):
        return AlterConnector(**_fields(items))

    def table_name(self, items):
        text = str(items[0])
        return text[1:-1].replace(text[0] * 2, text[0]) if text[:1] in "'\"" else text

    def alter_snapshot(self, items):
        return SnapshotTables(_fields(items)["name"], [i for i in items if type(i) is str])

    def alter_stream(self, items):
        return AlterStream(**_fields(items))

    def drop(self, items):
        return Drop(**_fields(items))

    def explain(self, items):
        return Explain(items[1])

    def set(self, items):
        _, (key, _token), value = items
        return Set(key, value)

    def select(self, items):
        token = items[0]
        _validate_sql(str(token), token, "duckdb")
        return Select(str(token).strip())


# ---- SQL validation with sqlglot -----------------------------------------------------------------


def _shift(token: Token, line: int, column: int) -> tuple[int, int]:
    """A (line, column) inside `token`'s text, in the coordinates of the text `token` came from."""
    return token.line + line - 1, (token.column + column - 1 if line == 1 else column)


def _validate_sql(sql: str, token: Token, dialect: str) -> exp.Expression:
    try:
        return sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError as e:
        info = e.errors[0] if e.errors else {}
        highlight = info.get("highlight") or ""
        line = info.get("line") or 1
        column = max(1, (info.get("col") or 1) - len(highlight) + 1)
        description = _tidy(info.get("description") or str(e))
        near = f" near {highlight!r}" if highlight else ""
        raise _Error(f"invalid SQL: {description}{near}", *_shift(token, line, column)) from e
    except sqlglot.errors.SqlglotError as e:
        raise _Error(f"invalid SQL: {e}", token.line, token.column) from e


def _tidy(description: str) -> str:
    """sqlglot's message without its internal token and class reprs."""
    description = re.sub(r"\s*but got <Token.*", "", description, flags=re.S)
    return re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", description)


def _select_stream(sql: str, token: Token) -> str:
    """The one table an `AS SELECT` reads from (CTE names do not count)."""
    tree = _validate_sql(sql, token, "spark")
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    tables = {t.name for t in tree.find_all(exp.Table) if t.name not in ctes}
    if len(tables) != 1:
        raise _Error("AS SELECT must read from exactly one stream", token.line, token.column)
    return tables.pop()


# ---- lark, errors, and splitting scripts ---------------------------------------------------------


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = resources.files(__package__).joinpath("connectql.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual", transformer=_Build())


def _accepted(state: ParserState) -> set[str]:
    """Terminals the parser really accepts next (LALR merges lookaheads; try each on a copy)."""
    conf = copy(state.parse_conf)
    conf.callbacks = {}
    accepted = set()
    for name in [t for t in conf.states[state.position] if t.isupper()]:
        probe = ParserState(conf, state.lexer, list(state.state_stack), list(state.value_stack))
        try:
            probe.feed_token(Token(name, ""), is_end=name == "$END")
        except UnexpectedToken:
            continue
        accepted.add(name)
    return accepted


def _expected(e: UnexpectedInput) -> str:
    state = getattr(e, "state", None)
    if isinstance(state, ParserState):
        names = _accepted(state)
    else:
        names = set(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())
    shown = sorted({_READABLE.get(n, n) for n in names})
    return shown[0] if len(shown) == 1 else "one of: " + ", ".join(shown)


def _shown(token: Token, hide: bool = False) -> str:
    """A token as quoted in an error: strings in full (up to 40 characters), else the first word;
    masked when it may be a secret value."""
    if hide:
        return f"string {_MASKED}" if token.type == "STRING" else _MASKED
    if token.type == "STRING":
        return f"string {token[:37] + '...' if len(token) > 40 else str(token)}"
    return repr(str(token).split(None, 1)[0])


def _may_be_secret(text: str, pos: int) -> bool:
    """Whether the text at `pos` of a statement may be a secret value: anything in a CREATE
    SECRET, and what follows a secret key (`password 'x'` lacks its '=')."""
    if _CREATE_SECRET.match(text):
        return True
    before = _LAST_WORD.search(text[:pos])
    return bool(before) and is_secret_key(before.group(1).strip("'\""))


def _as_select(e: UnexpectedToken) -> bool:
    return isinstance(e.state, ParserState) and _accepted(e.state) == {"SELECT_BODY"}


def _syntax_error(e: UnexpectedInput, text: str) -> _Error:
    if isinstance(e, UnexpectedToken) and e.token.type == "$END":
        where = (e.token.end_line or 1, e.token.end_column or 1)
        return _Error(f"unexpected end of statement, expected {_expected(e)}", *where)
    if isinstance(e, UnexpectedToken) and e.token.type == "SELECT_SQL" and _as_select(e):
        message = "AS SELECT needs a WITH (...) options clause after the query"
        return _Error(message, e.line, e.column)
    hide = _may_be_secret(text, e.pos_in_stream or 0)
    if isinstance(e, UnexpectedToken):
        shown = _shown(e.token, hide)
        return _Error(f"unexpected {shown}, expected {_expected(e)}", e.line, e.column)
    assert isinstance(e, UnexpectedCharacters)
    shown = _MASKED if hide else repr(_WORDISH.match(text, e.pos_in_stream).group())
    return _Error(f"unexpected {shown}, expected {_expected(e)}", e.line, e.column)


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of `text[index]`."""
    line = text.count("\n", 0, index) + 1
    return line, index - text.rfind("\n", 0, index)


def _split(script: str, source: str) -> list[tuple[int, int]]:
    """(start, end) of each non-empty statement's code: comments and blanks at its edges cut off."""
    spans: list[tuple[int, int]] = []
    start = end = -1
    for match in _SCAN.finditer(script):
        kind = match.lastgroup
        if kind == "bad":
            what = "comment" if match.group() == "/" else "quoted text"
            raise ParseError(f"unterminated {what}", *_position(script, match.start()), source)
        if kind == "code":
            start = match.start() if start < 0 else start
            end = match.end()
        elif kind == "semi" and start >= 0:
            spans.append((start, end))
            start = -1
    if start >= 0:
        spans.append((start, end))
    return spans


def _parse_span(script: str, start: int, end: int, source: str) -> Statement:
    text, (base_line, base_column) = script[start:end], _position(script, start)
    try:
        try:
            stmt = _parser().parse(text)
        except UnexpectedInput as e:
            raise _syntax_error(e, text) from None
    except _Error as e:
        line = base_line + e.line - 1
        column = base_column + e.column - 1 if e.line == 1 else e.column
        raise ParseError(e.message, line, column, source) from None
    stmt.line, stmt.text = base_line, text
    if isinstance(stmt, Explain):
        stmt.statement.line = base_line
        stmt.statement.text = text[len("explain") :].strip()
    return stmt


def parse_script(text: str, source: str = "") -> list[Statement]:
    """Every statement of a `;`-separated script, each with its `line` and `text` set."""
    return [_parse_span(text, start, end, source) for start, end in _split(text, source)]


def parse_statement(text: str) -> Statement:
    """Exactly one statement (a trailing `;` is allowed)."""
    spans = _split(text, "")
    if len(spans) != 1:
        at = _position(text, spans[1][0]) if spans else (1, 1)
        raise ParseError(f"expected exactly one statement, found {len(spans)}", *at)
    return _parse_span(text, *spans[0], "")


# ---- for an interactive prompt -------------------------------------------------------------------


def unfinished(text: str) -> str | None:
    """The statement `text` ends in while it is still being written: what follows its last `;`
    outside quotes and comments, when that holds code or an open quote or comment; else None."""
    tail, code = 0, False
    for match in _SCAN.finditer(text):
        kind = match.lastgroup
        if kind == "bad":  # an open quote or comment: any `;` after it is inside it
            return text[tail:]
        if kind == "semi":
            tail, code = match.end(), False
        code = code or kind == "code"
    return text[tail:] if code else None


def one_line(text: str) -> str:
    """`text` on one line, for a history: comments dropped, blanks between tokens one space."""
    parts: list[str] = []
    for match in _SCAN.finditer(text):
        blank = match.lastgroup == "skip"
        if not (blank and parts and parts[-1] == " "):
            parts.append(" " if blank else match.group())
    return "".join(parts).strip()


_AS_KEYWORD = {"SELECT_SQL": "SELECT", "WITH_SQL": "WITH", "SELECT_BODY": "SELECT"}


@lru_cache(maxsize=1)
def keywords() -> frozenset[str]:
    """The language's keywords (terminals that win over names), SELECT included."""
    named = {t.name for t in _parser().terminals if t.priority > 1 and t.name.isalpha()}
    return frozenset(named | set(_AS_KEYWORD.values()))


def next_terminals(prefix: str) -> tuple[list[Token], set[str]] | None:
    """For completion: the tokens of an unfinished statement and the terminals that may follow
    (a query as SELECT or WITH), or None when `prefix` already breaks the grammar."""
    try:
        interactive = _parser().parse_interactive(prefix)
        tokens = interactive.exhaust_lexer()
        accepted = interactive.accepts()
    except (UnexpectedInput, _Error):
        return None
    return tokens, {_AS_KEYWORD.get(name, name) for name in accepted}
