"""The `connectql` command: run a SQL script or statements in a worker, show results with rich."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from connectql.errors import ConnectQLError
from connectql.formats import FORMATS, Printer
from connectql.grammar.ast import is_name
from connectql.worker.home import default_home_text, home_of
from connectql.worker.results import Result

console = Console()
err_console = Console(stderr=True)

# rows_read: what the connector read (a sink: from its stream); rows_written: what reached its
# target (a sink's WHERE filters some, dead letters go elsewhere; README "Status tables")
STATUS_SQL = (
    "SELECT name, kind, type, state, round(rows_per_sec, 1) AS rows_per_sec,"
    " rows_total AS rows_read, rows_written, lag, last_error FROM connectors ORDER BY name"
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
    lines = _table_lines(worker)
    for row in rows:
        name, state, done = row[0], row[3], row[5] or 0
        cells = ["" if v is None else str(v) for v in row]
        cells[3] = f"[{STATE_STYLE.get(state, '')}]{state}[/]" if STATE_STYLE.get(state) else state
        table.add_row(*cells[:5], _progress(worker, name, done), *cells[5:])
        for line in lines.get(name, ()):
            table.add_row(*line)
    return table


TABLES_SQL = (
    'SELECT connector, "table", state, rows_read, rows_estimate, error FROM connector_tables'
    " ORDER BY connector, state = 'streaming' OR state = 'writing', \"table\""
)
TABLE_LINES = 5  # a connector's tables shown under it (those busy first), the rest counted


def _table_lines(worker) -> dict[str, list[tuple[str, ...]]]:
    """Under each connector of several tables: a line per table that is snapshotting, waiting
    or stopped (with its snapshot's bar), then how many others follow the log or are written."""
    _cols, rows = worker.catalog.query(TABLES_SQL)
    by: dict[str, list] = {}
    for connector, name, state, read, estimate, error in rows:
        by.setdefault(connector, []).append((name, state, read, estimate, error))
    lines: dict[str, list] = {}
    for connector, tables in by.items():
        busy = [t for t in tables if t[1] not in ("streaming", "writing")][:TABLE_LINES]
        out = lines[connector] = []
        for name, state, read, estimate, error in busy:
            snapshot = state == "snapshotting" and read is not None
            bar = _bar(read, estimate) if snapshot and estimate else ""
            cells = [f"  └ {escape(name)}", "table", "", escape(state), "", bar]
            cells += [str(read) if snapshot else "", "", "", escape(error or "")]
            out.append(tuple(cells))
        rest = len(tables) - len(busy)
        if rest:
            flowing = "writing" if tables[-1][1] == "writing" else "streaming"
            out.append((f"  └ {rest} more", "tables", "", flowing, *[""] * 6))
    return lines


_counted: dict[str, int | None] = {}


def _total(worker, name: str) -> int | None:
    """The size of a connector's bounded work: known to its plan, or asked once of its source."""
    plan = worker.engine.plans.get(name)
    if plan is None or plan.reader.count_rows is None:
        return None
    if name not in _counted:
        try:
            _counted[name] = plan.reader.count_rows()
        except Exception:  # the source cannot tell now: no bar rather than no status table
            _counted[name] = None
    return _counted[name]


def _progress(worker, name: str, done: int, width: int = 16) -> str:
    total = _total(worker, name)
    return _bar(done, total, width) if total else ""


def _bar(done: int, total: int, width: int = 16) -> str:
    share = min(done, total) / total
    percent = round(100 * share)  # a row count is often an estimate: 100% is full
    filled = width if percent == 100 else min(width - 1, int(share * width))
    return f"{'█' * filled}{'░' * (width - filled)} {percent:3d}%"


def _run_statements(backend, text: str, source: str, show=None) -> None:
    for result in backend.run(text, source):
        (show or Printer("table", console, err_console))(result)


def _busy(worker) -> bool:
    """Whether `run` has more to do: a query runs, a restart is pending, or a continuous
    connector started here is paused (another terminal may resume it through the API)."""
    paused = [e.name for e in worker.catalog.connectors() if e.desired_state == "paused"]
    return bool(worker.active()) or any(
        worker.engine.plans[n].run != "once" for n in paused if n in worker.engine.plans
    )


def _watch(worker, out: Console, statements) -> None:
    """Live status until Ctrl-C (continuous connectors) or until nothing runs any more. Asked
    between statements from the API (`statements`), so a RESUME half done is not 'nothing'."""
    with Live(status_table(worker), console=out, refresh_per_second=2) as live:
        while True:
            with statements:
                if not _busy(worker):
                    break
            time.sleep(0.5)
            live.update(status_table(worker))
        live.update(status_table(worker))


def _backend(args, deferred: bool = False):
    from connectql.api.client import connect

    given = args.home or default_home_text()  # a relative home is refused on a cluster
    return connect(home_of(args.home), args.server, args.token_file, deferred, given)


def cmd_run(args) -> int:
    from connectql.api.client import Embedded, token
    from connectql.api.serve import serving

    path = Path(args.file)
    if not path.is_file():
        raise ConnectQLError(f"no such script: {path}")
    backend = _backend(args)
    if not isinstance(backend, Embedded):  # a server runs it; its connectors stay there
        _run_statements(backend, path.read_text(), str(path), args.show)
        return 0
    worker = backend.worker
    worker.start_session_early_for(path.read_text())
    info = console if args.format == "table" else err_console  # stdout: only the rows
    try:
        # the API on loopback, so that status, sql, pause, ... reach this worker from elsewhere
        with serving(worker, "127.0.0.1", 0, token(args.token_file)) as (url, statements):
            info.print(f"[dim]serving {url} for {worker.home}[/dim]", soft_wrap=True)
            with statements:
                resumed = worker.resume_all()
                if resumed:
                    info.print(f"[dim]resumed from checkpoints: {', '.join(resumed)}[/dim]")
                _run_statements(backend, path.read_text(), str(path), args.show)
            if _busy(worker):  # runs until once-connectors finish, or until Ctrl-C
                _watch(worker, info, statements)
            statements.acquire()  # no statement from the API while the worker closes
    except KeyboardInterrupt:
        info.print("[yellow]stopping: queries stop gracefully, offsets are kept[/yellow]")
    finally:
        worker.close()
    return 0


def _run_sql(args, text: str) -> int:
    backend = _backend(args, deferred=True)  # its worker, if any, ends with the command
    try:
        _run_statements(backend, text, "", args.show)
    finally:
        backend.close()
    return 0


def cmd_sql(args) -> int:
    # each argument is a statement (or a script): joined as a script, each ending with ';'
    return _run_sql(args, "".join(f"{s.strip().rstrip(';')};\n" for s in args.statements))


def cmd_status(args) -> int:
    if args.name:
        return _run_sql(args, f"DESCRIBE CONNECTOR {_name(args.name)}")
    return _run_sql(args, STATUS_SQL)


def cmd_action(args) -> int:
    verb = "DROP" if args.command == "drop" else args.command.upper()
    return _run_sql(args, f"{verb} CONNECTOR {_name(args.name)}")


def _name(name: str, what: str = "connector") -> str:
    if not is_name(name):
        raise ConnectQLError(f"{name!r} is not a {what} name (letters, digits and _)")
    return name


def cmd_server(args) -> int:
    from connectql.api.client import token
    from connectql.api.serve import Tls, serve

    tls = Tls.of(args.tls_cert, args.tls_key)
    try:
        serve(
            args.home or default_home_text(),
            args.host,
            args.port,
            token(args.token_file),
            console.print,
            tls,
            args.standby,
        )
    except KeyboardInterrupt:  # SIGINT/SIGTERM is how a server stops: serve has shut it down
        pass
    return 0


def cmd_start(args) -> int:
    from connectql import daemon

    home = home_of(args.home)
    address = daemon.start(home, args.host, args.port, args.token_file, args.timeout)
    console.print(
        f"[green]✓[/green] connectql server on {address['url']} (pid {address['pid']}, home"
        f" {home}, log {home / daemon.LOG_FILE})",
        highlight=False,
        soft_wrap=True,
    )
    return 0


def cmd_stop(args) -> int:
    from connectql import daemon

    pid = daemon.stop(home_of(args.home), args.timeout)
    console.print(f"[green]✓[/green] stopped the connectql server (pid {pid})", soft_wrap=True)
    return 0


def cmd_secret_set(args) -> int:
    """Store a secret typed at a prompt without echo (or piped in), never on a command line."""
    import getpass

    name = _name(args.name, "secret")
    if sys.stdin.isatty():
        value = getpass.getpass(f"value of secret {name}: ")
    else:
        value = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    if not value:
        raise ConnectQLError(f"no value given for secret {name}: nothing stored")
    quoted = value.replace("'", "''")
    backend = _backend(args, deferred=True)
    try:
        list(backend.run(f"DROP SECRET IF EXISTS {name}; CREATE SECRET {name} AS '{quoted}'"))
    finally:
        backend.close()
    args.show(Result(f"stored secret {name}; connectors read it when they (re)start"))
    return 0


def cmd_shell(args) -> int:
    from connectql.shell import run_shell

    backend = _backend(args)
    try:
        return run_shell(backend, args.show)
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
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show the JVM's and Spark's warnings on the terminal (else in the home's spark.log)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="how rows are printed: table (fitted to the terminal), json, csv, vertical",
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
    start = sub.add_parser("start", help="start connectql server in the background for the home")
    for command in (server, start):
        command.add_argument("--host", default="127.0.0.1", help="address (127.0.0.1)")
        command.add_argument("--port", type=int, default=8083, help="port (8083; 0: any free)")
    server.add_argument("--tls-cert", help="serve HTTPS with this certificate chain (PEM)")
    server.add_argument("--tls-key", help="the certificate's private key (PEM)")
    server.add_argument(
        "--standby",
        action="store_true",
        help="wait beside the home's active worker and take over when its lease lapses",
    )
    server.set_defaults(func=cmd_server)
    start.add_argument("--timeout", type=float, default=180, help="seconds to wait (180)")
    start.set_defaults(func=cmd_start)
    stop = sub.add_parser("stop", help="stop the home's background server gracefully")
    stop.add_argument("--timeout", type=float, default=180, help="seconds to wait (180)")
    stop.set_defaults(func=cmd_stop)
    secret = sub.add_parser("secret", help="secrets: connectql secret set NAME")
    secret_sub = secret.add_subparsers(dest="secret_command", required=True)
    secret_set = secret_sub.add_parser(
        "set", help="store a secret read from a prompt without echo, or from standard input"
    )
    secret_set.add_argument("name")
    secret_set.set_defaults(func=cmd_secret_set)
    shell = sub.add_parser("shell", help="an interactive SQL prompt")
    shell.set_defaults(func=cmd_shell)
    return p


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.show = Printer(args.format, console, err_console)
    if args.verbose:
        os.environ["CONNECTQL_VERBOSE"] = "1"  # a server `start` runs inherits it
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.func(args)
    except ConnectQLError as e:
        # a pipe gets the whole line (a terminal wraps it); the text is no markup
        wrap = not err_console.is_terminal
        err_console.print(
            f"[bold red]error:[/bold red] {escape(str(e))}", highlight=False, soft_wrap=wrap
        )
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
