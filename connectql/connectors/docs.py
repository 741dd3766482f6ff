"""The README's connector option tables, generated from the option declarations:
`python -m connectql.connectors.docs` prints them; `--write README.md` updates them in place."""

from __future__ import annotations

from connectql.connectors import registry
from connectql.connectors.common import SOURCE_COMMON


def _cell(text) -> str:
    return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def option_table(options, skip=()) -> str:
    lines = ["| option | type | default | required | doc |", "| --- | --- | --- | --- | --- |"]
    for o in options.values():
        if o.name in skip:
            continue
        shown = str(o.default).lower() if isinstance(o.default, bool) else o.default
        default = "" if o.default is None else f"`{shown}`"
        lines.append(
            f"| `{o.name}` | {_cell(o.describe_type())} | {default} |"
            f" {'yes' if o.required else ''} | {_cell(o.doc)} |"
        )
    return "\n".join(lines)


def markdown() -> str:
    parts = ["### Options every connector has", "", option_table(SOURCE_COMMON), ""]
    for plugin in registry.builtins():  # not the plugins of whatever packages are installed
        for kind in plugin.kinds:
            options = plugin.options_for(kind)
            # a common option declared otherwise for this kind (a sink's tasks.max) is shown
            same = {k for k, o in SOURCE_COMMON.items() if options.get(k) == o}
            parts += [
                f"### `{plugin.type}` {kind}",
                "",
                plugin.doc,
                "",
                option_table(options, skip=same),
                "",
            ]
    return "\n".join(parts).rstrip() + "\n"


BEGIN, END = "<!-- options:begin", "<!-- options:end -->"


def update(text: str) -> str:
    """`text` with the part between the option markers replaced by the current tables."""
    head, rest = text.split(BEGIN, 1)
    marker_line, _old = rest.split("\n", 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}{marker_line}\n{markdown()}{END}{tail}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:2] == ["--write"]:
        path = Path(sys.argv[2])
        path.write_text(update(path.read_text()))
    else:
        print(markdown(), end="")
