"""The `connectql` command: run a SQL script or statements in a worker, show results with rich."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from connectql.errors import ConnectQLError
from connectql.grammar.ast import is_name
from connectql.server.home import home_of
from connectql.server.results import render

console = Console()
err_console = Console(stderr=True)

STATUS_SQL = (
    "SELECT name, kind, type, state, round(rows_per_sec, 1) AS rows_per_sec, rows_total,"
    " lag, last_error FROM connectors ORDER BY name"
)
STATE_STYLE = {
    "RUNNING": "green",
    "FINISHED": "blue",
    "FAILED": "bold red",
    "STALLED": "yellow",
    "RESTARTING": "yellow",
    "PAUSED": "dim",
    "STOPPED": "dim",
}


def status_table(worker) -> Table:
    """The connectors as a table, with a progress bar where the work is bounded."""
    cols, rows = worker.catalog.query(STATUS_SQL)
    table = Table(
        title=f"connectors — {time.strftime('%H:%M:%S')} — Ctrl-C stops", title_justify="left"
    )
    for col in [*cols[:5], "progress", *cols[5:]]:
        table.add_column(col, overflow="fold")
    for row in rows:
        name, state, done = row[0], row[3], row[5] or 0
        cells = ["" if v is None else str(v) for v in row]
        cells[3] = f"[{STATE_STYLE.get(state, '')}]{state}[/]" if STATE_STYLE.get(state) else state
        table.add_row(*cells[:5], _progress(worker, name, done), *cells[5:])
    return table


_counted: dict[str, int | None] = {}


def _total(worker, name: str) -> int | None:
    """The size of a connector's bounded work: known to its plan, or asked once of its source."""
    plan = worker.engine.plans.get(name)
    if plan is None or plan.reader.total_rows or plan.reader.count_rows is None:
        return plan.reader.total_rows if plan else None
    if name not in _counted:
        try:
            _counted[name] = plan.reader.count_rows()
        except Exception:  # the source cannot tell now: no bar rather than no status table
            _counted[name] = None
    return _counted[name]


def _progress(worker, name: str, done: int, width: int = 16) -> str:
    total = _total(worker, name)
    if not total:
        return ""
    filled = min(done, total) * width // total
    return f"{'█' * filled}{'░' * (width - filled)} {100 * min(done, total) / total:3.0f}%"


def _run_statements(backend, text: str, source: str) -> None:
    for result in backend.run(text, source):
        render(result, console)


def _watch(worker) -> None:
    """Live status until Ctrl-C (continuous connectors) or until nothing runs any more."""
    with Live(status_table(worker), console=console, refresh_per_second=2) as live:
        while worker.active():
            time.sleep(0.5)
            live.update(status_table(worker))
        live.update(status_table(worker))


def _backend(args):
    from connectql.server.client import connect

    return connect(home_of(args.home), args.server, args.token_file)


def cmd_run(args) -> int:
    from connectql.server.client import Embedded

    path = Path(args.file)
    if not path.is_file():
        raise ConnectQLError(f"no such script: {path}")
    backend = _backend(args)
    if not isinstance(backend, Embedded):  # a server runs it; its connectors stay there
        _run_statements(backend, path.read_text(), str(path))
        return 0
    worker = backend.worker
    try:
        resumed = worker.resume_all()
        if resumed:
            console.print(f"[dim]resumed from checkpoints: {', '.join(resumed)}[/dim]")
        _run_statements(backend, path.read_text(), str(path))
        if worker.active():  # runs until once-connectors finish, or until Ctrl-C
            _watch(worker)
    except KeyboardInterrupt:
        console.print("[yellow]stopping: queries stop gracefully, offsets are kept[/yellow]")
    finally:
        worker.close()
    return 0


def _run_sql(args, text: str) -> int:
    backend = _backend(args)
    try:
        _run_statements(backend, text, "")
    finally:
        backend.close()
    return 0


def cmd_sql(args) -> int:
    return _run_sql(args, " ".join(args.statements))


def cmd_status(args) -> int:
    if args.name:
        return _run_sql(args, f"DESCRIBE CONNECTOR {_name(args.name)}")
    return _run_sql(args, STATUS_SQL)


def cmd_action(args) -> int:
    verb = "DROP" if args.command == "drop" else args.command.upper()
    return _run_sql(args, f"{verb} CONNECTOR {_name(args.name)}")


def _name(name: str) -> str:
    if not is_name(name):
        raise ConnectQLError(f"{name!r} is not a connector name (letters, digits and _)")
    return name


def cmd_server(args) -> int:
    from connectql.server.api import serve
    from connectql.server.client import token

    try:
        serve(home_of(args.home), args.host, args.port, token(args.token_file), say=console.print)
    except KeyboardInterrupt:  # SIGINT/SIGTERM is how a server stops: serve has shut it down
        pass
    return 0


def cmd_shell(args) -> int:
    from connectql.shell import run_shell

    backend = _backend(args)
    try:
        return run_shell(backend, console)
    finally:
        backend.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="connectql", description=__doc__)
    p.add_argument("--home", help="state directory (default: $CONNECTQL_HOME or ./.connectql)")
    p.add_argument(
        "--server",
        metavar="URL",
        help="a running connectql server to talk to (default: the one serving the home, if any)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="the API token, read from FILE (default: $CONNECTQL_TOKEN)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a SQL script; continuous connectors run until Ctrl-C")
    run.add_argument("file")
    run.set_defaults(func=cmd_run)
    sql = sub.add_parser("sql", help='run statements, e.g. connectql sql "SHOW CONNECTORS"')
    sql.add_argument("statements", nargs="+")
    sql.set_defaults(func=cmd_sql)
    status = sub.add_parser("status", help="the connectors' status, or one connector's details")
    status.add_argument("name", nargs="?")
    status.set_defaults(func=cmd_status)
    for verb in ("pause", "resume", "restart", "drop"):
        action = sub.add_parser(verb, help=f"{verb} a connector")
        action.add_argument("name")
        action.set_defaults(func=cmd_action)
    server = sub.add_parser("server", help="run the worker headless with an HTTP API")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    server.add_argument("--port", type=int, default=8083, help="port (8083; 0 picks a free one)")
    server.set_defaults(func=cmd_server)
    shell = sub.add_parser("shell", help="an interactive SQL prompt")
    shell.set_defaults(func=cmd_shell)
    return p


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.func(args)
    except ConnectQLError as e:
        err_console.print(f"[bold red]error:[/bold red] {e}", highlight=False)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
