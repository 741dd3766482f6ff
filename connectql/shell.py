"""`connectql shell`: an interactive prompt (readline) that runs statements as each `;` ends them.

History is kept in `<home>/shell_history` with a worker in this process, in ~/.connectql_history
when talking to a server. Without a terminal on stdin, the statements piped in run without a
prompt and the first error ends the shell with exit code 1.
"""

from __future__ import annotations

import logging
import re
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.text import Text

from connectql.api.client import Embedded
from connectql.catalog.redact import written_secrets
from connectql.catalog.schema import PUBLIC_TABLES
from connectql.errors import ConnectQLError
from connectql.formats import Printer
from connectql.grammar.ast import is_name
from connectql.grammar.parser import (
    keywords,
    next_terminals,
    one_line,
    parse_script,
    unfinished,
)
from connectql.worker.home import home_of
from connectql.worker.results import Result

log = logging.getLogger("connectql.shell")

PROMPT, MORE = "connectql> ", "       ..> "
EXITS = {"exit", "quit"}
HISTORY_LENGTH = 1000
KEYS = "End statements with ;  Tab completes, Ctrl-C clears the input, Ctrl-D or exit leaves."
# Where readline cuts the word Tab completes: dots and dashes belong to option keys.
WORD_DELIMITERS = " \t\n(),=;"


def run_shell(backend, show: Printer) -> int:
    """The prompt on a terminal, else the statements read from stdin, each result printed by
    `show` (the command's `--format`); returns the exit code."""
    signal.signal(signal.SIGTERM, _terminated)  # not the CLI's KeyboardInterrupt: that clears
    if isinstance(backend, Embedded):
        backend.worker  # noqa: B018 (a home held by another worker fails now, not at a prompt)
    if not sys.stdin.isatty():
        return run_piped(backend, show, sys.stdin)
    return _interact(backend, show, history_file(backend))


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def history_file(backend) -> Path:
    if isinstance(backend, Embedded):
        return home_of(backend.home) / "shell_history"
    return Path.home() / ".connectql_history"


# ---- reading statements ----------------------------------------------------------------------


class Pending:
    """The lines of the statement being written, until a `;` outside quotes ends it."""

    def __init__(self):
        self.lines: list[str] = []

    def add(self, line: str) -> str | None:
        """The whole text once all its statements are ended, else None (read on)."""
        self.lines.append(line)
        text = "\n".join(self.lines)
        if unfinished(text) is not None:
            return None
        self.lines.clear()
        return text if text.strip() else None

    def rest(self) -> str:
        """What was read of an unended statement; the lines are cleared."""
        text = "\n".join(self.lines)
        self.lines.clear()
        return text


def is_exit(line: str) -> bool:
    return line.strip().rstrip(";").strip().lower() in EXITS


def execute(backend, show: Printer, text: str) -> bool:
    """Run `text` and print each result; on an error print it and return False."""
    try:
        for result in backend.run(text):
            show(result)
    except ConnectQLError as e:
        return _error(show.err, str(e))
    except KeyboardInterrupt:
        return _error(show.err, "interrupted")
    except Exception as e:  # a bug should not end the session: say it, log the traceback
        log.exception("statement failed: %s", recordable(text) or "(not shown: may hold a secret)")
        return _error(show.err, f"{type(e).__name__}: {e}")
    return True


def _error(errors: Console, message: str) -> bool:
    errors.print(Text.assemble(("error: ", "bold red"), (message, "red")))
    return False


def run_piped(backend, show: Printer, lines: Iterable[str]) -> int:
    """Statements read from a pipe, each run once read; the first error stops with 1."""
    pending = Pending()
    for line in lines:
        if not pending.lines and is_exit(line):
            return 0
        text = pending.add(line.rstrip("\n"))
        if text and not execute(backend, show, text):
            return 1
    rest = pending.rest()  # a last statement may lack its `;`
    return 0 if not rest.strip() or execute(backend, show, rest) else 1


def _interact(backend, show: Printer, history: Path) -> int:
    pending, names, console = Pending(), Names(backend), show.console
    _setup_readline(Completer(names, pending), history)
    where = getattr(backend, "url", None) or f"{home_of(backend.home)} (worker in this process)"
    console.print(Text(f"connectql shell on {where}. {KEYS}", style="dim"))
    while True:
        try:
            line = input(MORE if pending.lines else PROMPT)
        except EOFError:
            console.print()
            return 0
        except KeyboardInterrupt:
            pending.rest()
            console.print()
            continue
        if not pending.lines and is_exit(line):
            return 0
        text = pending.add(line)
        if text:
            _remember(text, history)
            execute(backend, show, text)
            names.forget()


# ---- readline: history and completion --------------------------------------------------------


def _setup_readline(completer, history: Path) -> None:
    import readline

    readline.set_completer(completer)
    readline.set_completer_delims(WORD_DELIMITERS)
    libedit = "libedit" in (readline.__doc__ or "")
    readline.parse_and_bind("bind ^I rl_complete" if libedit else "tab: complete")
    readline.set_auto_history(False)  # a statement is one entry, however many lines it took
    readline.set_history_length(HISTORY_LENGTH)
    try:
        readline.read_history_file(history)
    except OSError:
        pass


def recordable(text: str) -> str | None:
    """`text` on one line for the history file or a log, or None when it may hold a secret
    value: a statement that writes one (CREATE SECRET, an inline password, SET of a secret
    key), or text that does not parse (a typo may be in one)."""
    try:
        statements = parse_script(text)
    except ConnectQLError:
        return None
    return None if any(written_secrets(s) for s in statements) else one_line(text)


def _remember(text: str, history: Path) -> None:
    """`text` as the newest history entry, on one line, appended to the file at once; one that
    may hold a secret is recalled in this session only."""
    import readline

    entry = one_line(text)
    if not entry:
        return
    readline.add_history(entry)
    if recordable(text) is None:
        return
    try:
        history.parent.mkdir(parents=True, exist_ok=True)
        history.touch(mode=0o600)  # statements name hosts and users: the owner's to read
        readline.append_history_file(1, history)  # also cuts the file to HISTORY_LENGTH
    except OSError:
        pass


class Names:
    """What completion offers, asked of the backend with SHOW and DESCRIBE statements: catalog
    names again after statements ran (`forget`), plugins and their options once."""

    def __init__(self, backend):
        self.backend = backend
        self._catalog: dict[str, list[dict]] | None = None
        self._plugins: list[dict] | None = None
        self._options: dict[tuple[str, str], dict[str, str]] = {}

    def forget(self) -> None:
        self._catalog = None

    def _ask(self, sql: str) -> list[list[dict]]:
        return [_records(result) for result in self.backend.run(sql)]

    def _listed(self, what: str) -> list[dict]:
        if self._catalog is None:
            found = self._ask("SHOW CONNECTORS; SHOW STREAMS; SHOW SECRETS")
            self._catalog = dict(zip(("connectors", "streams", "secrets"), found, strict=True))
        return self._catalog[what]

    def names(self, what: str) -> list[str]:
        """The names of the connectors, streams or secrets."""
        return [r["name"] for r in self._listed(what)]

    def connector(self, name: str) -> dict:
        return next((r for r in self._listed("connectors") if r["name"] == name), {})

    def types(self) -> list[str]:
        """The installed connector types."""
        if self._plugins is None:
            self._plugins = self._ask("SHOW CONNECTOR PLUGINS")[0]
        return [p["type"] for p in self._plugins if p["installed"] == "yes"]

    def options(self, type_name: str, kind: str) -> dict[str, str]:
        """A type's declared options for a kind of connector: key -> declared value type."""
        if not is_name(type_name):  # it goes into a statement
            return {}
        if (type_name, kind) not in self._options:
            try:
                rows = self._ask(f"DESCRIBE PLUGIN {type_name}")[0]
            except ConnectQLError:  # not a type (yet): nothing to offer
                rows = []
            found = {r["option"]: r["type"] for r in rows if r["kind"] == kind}
            self._options[type_name, kind] = found
        return self._options[type_name, kind]


def _records(result: Result) -> list[dict]:
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


class Completer:
    """readline's completer: the candidates for the word under the cursor, asked for once (at
    state 0) and handed out one per call."""

    def __init__(self, names: Names, pending: Pending):
        self.names, self.pending = names, pending
        self.matches: list[str] = []

    def __call__(self, text: str, state: int) -> str | None:
        if state == 0:
            import readline

            before = readline.get_line_buffer()[: readline.get_begidx()]
            statement = unfinished("\n".join([*self.pending.lines, before])) or ""
            try:
                self.matches = candidates(self.names, statement, text)
            except Exception:  # a server gone away, say: no candidates, the prompt goes on
                log.debug("completion failed", exc_info=True)
                self.matches = []
        return self.matches[state] if state < len(self.matches) else None


def candidates(names: Names, statement: str, text: str) -> list[str]:
    """What may replace `text` after `statement`, the statement written so far."""
    found = next_terminals(statement)
    if found is None or (found[0] and found[0][-1].type in ("SELECT_SQL", "WITH_SQL")):
        return _matching(_query_tables(names, statement), text)
    tokens, accepted = found
    last = tokens[-1].type if tokens else ""
    words = [
        _cased(k, text) for k in sorted(accepted & keywords()) if k != "IF" or _may_be_if(tokens)
    ]
    if "NAME" in accepted:
        words += _names_after([t.type for t in tokens], names)
    if "WORD" in accepted and last in ("LPAR", "COMMA"):
        words += _option_keys(tokens, names)
    if last == "EQUAL" and "LPAR" in {t.type for t in tokens}:
        words += _option_values(tokens, names)
    return _matching(words, text)


def _may_be_if(tokens: list) -> bool:
    """Whether IF would start IF [NOT] EXISTS (elsewhere the grammar takes it only as a name)."""
    kinds = [t.type for t in tokens]
    object_word = kinds[-1:] in (["CONNECTOR"], ["STREAM"], ["SECRET"])
    return object_word and bool({"CREATE", "DROP"} & set(kinds))


def _cased(keyword: str, text: str) -> str:
    """A keyword in the case the user is typing in."""
    return keyword.lower() if text and text == text.lower() else keyword


def _matching(words: list[str], text: str) -> list[str]:
    """The words `text` begins (ignoring case), each with a space after it; an opening quote
    in `text` quotes them."""
    quote = text[0] if text[:1] in ("'", '"') else ""
    start = text[len(quote) :].lower()
    found = [w for w in words if w.lower().startswith(start)]
    # Python's readline appends no space after a completed word: the candidates carry one.
    return sorted({f"{quote}{w}{quote} " if quote else f"{w} " for w in found})


def _query_tables(names: Names, statement: str) -> list[str]:
    """In a query, after FROM or JOIN: the catalog tables and the streams."""
    if not re.search(r"\b(from|join)\s+$", statement, re.I):
        return []
    return [*PUBLIC_TABLES, *names.names("streams")]


def _names_after(kinds: list[str], names: Names) -> list[str]:
    """The names that fit where the grammar wants a name, by the keywords before it."""
    last = next((k for k in reversed(kinds) if k not in ("IF", "NOT", "EXISTS")), "")
    if last == "SECRET" and "LPAR" in kinds:  # an option's value: SECRET name
        return names.names("secrets")
    if last == "INTO" or (last == "FROM" and "SINK" in kinds):
        return names.names("streams")
    if last in ("FROM", "TO", "PLUGIN"):
        return names.types()
    if "CREATE" in kinds:  # the name of a new object
        return []
    plural = {"CONNECTOR": "connectors", "STREAM": "streams", "SECRET": "secrets"}
    return names.names(plural[last]) if last in plural else []


def _declared(tokens: list, names: Names) -> dict[str, str]:
    """The options of the connector a statement creates or alters: key -> declared type."""
    kinds = [t.type for t in tokens]
    if kinds[:2] == ["ALTER", "CONNECTOR"]:
        entry = names.connector(str(tokens[2]))
        return names.options(entry["type"], entry["kind"]) if entry else {}
    if "CREATE" not in kinds or not {"SOURCE", "SINK"} & set(kinds):
        return {}
    kind = "source" if "SOURCE" in kinds else "sink"
    type_name = _type_written(tokens, "FROM" if kind == "source" else "TO")
    return names.options(type_name, kind) if type_name else {}


def _type_written(tokens: list, keyword: str) -> str | None:
    """The connector type: the name after FROM/TO, else the option `connector` so far."""
    for before, token in zip(tokens, tokens[1:], strict=False):
        if before.type == keyword and token.type == "NAME":
            return str(token)
    options = _options_written(tokens)
    return options.get("connector")


def _options_written(tokens: list) -> dict[str, str]:
    """The key = value pairs of the option list being written, unquoted."""
    opened = [i for i, t in enumerate(tokens) if t.type == "LPAR"]
    written, inside = {}, tokens[opened[-1] + 1 :] if opened else []
    for key, equal, value in zip(inside, inside[1:], inside[2:], strict=False):
        if equal.type == "EQUAL":
            written[_bare(key).lower()] = _bare(value)
    return written


def _bare(token) -> str:
    text = str(token)
    return text[1:-1] if token.type == "STRING" else text


def _option_keys(tokens: list, names: Names) -> list[str]:
    """The declared keys not written yet in this option list."""
    written = _options_written(tokens)
    return [k for k in _declared(tokens, names) if k not in written]


def _option_values(tokens: list, names: Names) -> list[str]:
    """The values an option may take, when it declares them (one of ..., or a bool)."""
    key = _bare(tokens[-2]).lower()
    declared = _declared(tokens, names).get(key, "")
    if declared == "bool":
        return ["true", "false"]
    return re.findall(r"'[^']*'", declared) if declared.startswith("one of") else []
