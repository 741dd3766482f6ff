"""A connector's option table in Markdown, from its option declarations (the docs site's
connector pages: connectql.docsite)."""

from __future__ import annotations


def cell(text) -> str:
    return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def option_table(options, skip=()) -> str:
    lines = ["| option | type | default | required | doc |", "| --- | --- | --- | --- | --- |"]
    for o in options.values():
        if o.name in skip:
            continue
        shown = str(o.default).lower() if isinstance(o.default, bool) else o.default
        default = "" if o.default is None else f"`{shown}`"
        lines.append(
            f"| `{o.name}` | {cell(o.describe_type())} | {default} |"
            f" {'yes' if o.required else ''} | {cell(o.doc)} |"
        )
    return "\n".join(lines)
