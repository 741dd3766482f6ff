"""The docs site's generated parts (docs/, built by MkDocs): each connector page's option tables,
the command line reference and the HTTP API reference, written from the option declarations,
the argument parser and the OpenAPI document, never by hand. `python -m connectql.docsite`
rewrites them; `--check` lists the stale ones and exits 1."""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path

# a generated region of a hand-written page: <!-- generated: KEY --> ... <!-- generated: end -->
REGION = re.compile(r"(<!-- generated: (\S+) -->\n).*?(<!-- generated: end -->)", re.S)
HELP_COLUMNS = "100"  # argparse wraps its help to the terminal: the same width everywhere


def region(key: str) -> str:
    """A region's text: 'options:common' (every connector's options), 'options:TYPE' (one
    connector's), 'connectors:PREFIX' (the built-in connectors, each linked to its page,
    PREFIX/TYPE.md), 'settings' (the worker's settings) or 'states' (the lifecycle)."""
    from connectql.connectors import registry
    from connectql.connectors.common import SOURCE_COMMON
    from connectql.connectors.docs import option_table

    kind, _, name = key.partition(":")
    if kind == "connectors":
        return connector_list(name)
    if kind == "states":
        return states_table()
    if kind == "settings":
        from connectql.worker.settings import WORKER_SETTINGS

        return option_table(WORKER_SETTINGS).replace("| option |", "| setting |", 1) + "\n"
    if kind != "options":
        raise ValueError(f"unknown generated region {key!r}")
    if name == "common":
        return option_table(SOURCE_COMMON) + "\n"
    plugin = next((p for p in registry.builtins() if p.type == name), None)
    if plugin is None:
        raise ValueError(f"generated region {key!r}: no built-in connector {name!r}")
    parts = []
    for kind in plugin.kinds:
        options = plugin.options_for(kind)
        same = {k for k, o in SOURCE_COMMON.items() if options.get(k) == o}
        parts += [f"### The {kind}'s options", "", option_table(options, skip=same), ""]
    return "\n".join(parts)


def states_table() -> str:
    """A connector's states, where each may go, and the actions each allows (catalog/states)."""
    from connectql.catalog import states

    out = ["| state | may become | PAUSE / RESUME / RESET OFFSETS |", "| --- | --- | --- |"]
    for state in states.STATES:
        allowed = [a for a in ("pause", "resume", "reset_offsets") if state in states.ACTIONS[a]]
        actions = ", ".join(a.replace("_", " ").upper() for a in allowed) or "–"
        nexts = ", ".join(s for s in states.STATES if s in states.TRANSITIONS[state])
        out.append(f"| `{state}` | {nexts} | {actions} |")
    return "\n".join(out) + "\n"


def filled(text: str) -> str:
    """`text` with each generated region's current content."""
    return REGION.sub(lambda m: f"{m.group(1)}\n{region(m.group(2))}\n{m.group(3)}", text)


def connector_list(prefix: str) -> str:
    from connectql.connectors import registry
    from connectql.connectors.docs import cell

    lines = ["| connector | as | what it is |", "| --- | --- | --- |"]
    for p in registry.builtins():
        link = f"{prefix}/{p.type}.md" if prefix else f"{p.type}.md"
        lines.append(f"| [`{p.type}`]({link}) | {' and '.join(p.kinds)} | {cell(p.doc)} |")
    return "\n".join(lines) + "\n"


def index_page(readme: str) -> str:
    """The site's home: the README (the front door) without its test marks, its links made
    relative to docs/."""
    text = re.sub(r"<!-- readme-test[^>]*-->\n", "", readme)
    text = text.replace("](docs/", "](").replace("](bench/README.md)", "](benchmarks.md)")
    text = text.replace("connectors:docs/connectors -->", "connectors:connectors -->")
    text = filled(text)
    return text.replace(
        "The docs site in [docs/](index.md) (MkDocs;", "This site, built from\n`docs/` (MkDocs;"
    )


def cli_page() -> str:
    from connectql.cli import parser

    top = parser()
    out = ["# Command line", "", "Generated from the argument parser (`connectql --help`).", ""]
    for name, sub in [("connectql", top), *_commands(top)]:
        out += [f"## `{name}`", "", "```text", _help(sub).rstrip(), "```", ""]
    return "\n".join(out)


def _commands(p: argparse.ArgumentParser, prefix: str = "connectql"):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _commands(sub, f"{prefix} {name}")


def _help(p: argparse.ArgumentParser) -> str:
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        text = io.StringIO()
        with redirect_stdout(text):
            p.print_help()
        return text.getvalue()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


SECTION = re.compile(r"^// -+ (.+?) -+$")
KEYWORD = re.compile(r"^([A-Z_]+)\.2: /([a-z]+)\(\?!\[A-Za-z0-9_\.\]\|-\(\?!-\)\)/i$")


def grammar_page() -> str:
    """The SQL grammar reference, from the parser's lark grammar: its sections, their
    comments as text and their rules as they are; keywords listed, other tokens shown."""
    from connectql.grammar import parser as grammar

    text = (Path(grammar.__file__).parent / "connectql.lark").read_text()
    out = [
        "# SQL grammar",
        "",
        "Generated from the parser's grammar (`connectql/grammar/connectql.lark`, lark, LALR);"
        " [SQL reference](../sql.md) says what each statement does. `?` optional, `*` any"
        " number, `|` or; `-> name` names an alternative.",
        "",
    ]
    keywords: list[str] = []
    block: list[str] = []
    said: list[str] = []
    note: list[str] = []  # what the grammar says of its keywords

    def flush() -> None:
        while block and not block[-1]:
            block.pop()
        if said:
            out.extend([" ".join(said), ""])
            said.clear()
        if block:
            out.extend(["```text", *block, "```", ""])
            block.clear()

    for line in text.splitlines():
        section, keyword = SECTION.match(line), KEYWORD.match(line)
        if section:
            flush()
            out += [f"## {section.group(1).capitalize()}", ""]
        elif keyword:
            keywords.append(keyword.group(2).upper())
            note += said
            said.clear()
        elif line.startswith("//"):
            if block:
                flush()
            said.append(line.lstrip("/ "))
        elif line.strip() and not line.startswith("%"):
            if said and not block:
                out.extend([" ".join(said), ""])
                said.clear()
            block.append(line)
        elif block:
            block.append("")
    flush()
    out += ["## Keywords", "", " ".join(note), "", ", ".join(f"`{k}`" for k in keywords), ""]
    return "\n".join(out)


def api_page() -> str:
    spec = openapi()
    out = [
        "# HTTP API",
        "",
        "Generated from the OpenAPI document a server serves at `GET /openapi.json`"
        ' (interactive at `GET /docs`). Errors answer `{"error_code", "message"}`.',
        "",
        "| method | path | what it does | answers |",
        "| --- | --- | --- | --- |",
    ]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            codes = ", ".join(sorted(op.get("responses", {})))
            summary = op.get("summary", "").replace("|", "\\|")
            out.append(f"| `{method.upper()}` | `{path}` | {summary} | {codes} |")
    return "\n".join(out) + "\n"


def openapi() -> dict:
    """The OpenAPI document of the routes, made without a worker."""
    from prometheus_client import CollectorRegistry

    from connectql.api.app import api

    class Shapes:  # what the app reads of Routes to describe them: no handler is called
        registry = CollectorRegistry()

        def __getattr__(self, name):
            return lambda request: (200, None)

    return api(Shapes()).openapi()


def render(root: Path) -> dict[Path, str]:
    """Every file with generated parts (the docs' pages and the README beside them), as it
    should read."""
    out = {}
    for page in [*sorted(root.rglob("*.md")), root.parent / "README.md"]:
        text = page.read_text()
        new = filled(text)
        if new != text:
            out[page] = new
    out[root / "index.md"] = index_page((root.parent / "README.md").read_text())
    out[root / "reference/cli.md"] = cli_page()
    out[root / "reference/api.md"] = api_page()
    out[root / "reference/grammar.md"] = grammar_page()
    return out


def stale(root: Path) -> list[Path]:
    return [p for p, text in render(root).items() if not p.exists() or p.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m connectql.docsite", description=__doc__)
    ap.add_argument("--docs", default="docs", help="the docs directory (docs)")
    ap.add_argument("--check", action="store_true", help="only list the stale files")
    args = ap.parse_args(argv)
    root = Path(args.docs)
    if args.check:
        old = stale(root)
        for p in old:
            print(f"stale: {p} (python -m connectql.docsite writes it)")
        return 1 if old else 0
    for path, text in render(root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
