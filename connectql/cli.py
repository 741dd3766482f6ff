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


def render(result) -> None:
    if result.is_table:
        table = Table(title=result.title or None, title_justify="left", show_lines=False)
        for col in result.columns:
            table.add_column(col, overflow="fold")
        for row in result.rows:
            table.add_row(*("" if v is None else str(v) for v in row))
        console.print(table)
    elif result.message:
        console.print(f"[green]✓[/green] {result.message}")


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


def _run_statements(worker, text: str, source: str) -> None:
    for _stmt, result in worker.run_script(text, source):
        render(result)


def _watch(worker) -> None:
    """Live status until Ctrl-C (continuous connectors) or until nothing runs any more."""
    with Live(status_table(worker), console=console, refresh_per_second=2) as live:
        while worker.active():
            time.sleep(0.5)
            live.update(status_table(worker))
        live.update(status_table(worker))


def cmd_run(args) -> int:
    from connectql.server.worker import Worker

    path = Path(args.file)
    if not path.is_file():
        raise ConnectQLError(f"no such script: {path}")
    worker = Worker(args.home)
    try:
        resumed = worker.resume_all()
        if resumed:
            console.print(f"[dim]resumed from checkpoints: {', '.join(resumed)}[/dim]")
        _run_statements(worker, path.read_text(), str(path))
        if worker.active():  # runs until once-connectors finish, or until Ctrl-C
            _watch(worker)
    except KeyboardInterrupt:
        console.print("[yellow]stopping: queries stop gracefully, offsets are kept[/yellow]")
    finally:
        worker.close()
    return 0


def cmd_sql(args) -> int:
    from connectql.server.worker import Worker

    worker = Worker(args.home)
    try:
        _run_statements(worker, " ".join(args.statements), "")
        worker.wait_for_once()
    finally:
        worker.close()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="connectql", description=__doc__)
    p.add_argument("--home", help="state directory (default: $CONNECTQL_HOME or ./.connectql)")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a SQL script; continuous connectors run until Ctrl-C")
    run.add_argument("file")
    run.set_defaults(func=cmd_run)
    sql = sub.add_parser("sql", help='run statements, e.g. connectql sql "SHOW CONNECTORS"')
    sql.add_argument("statements", nargs="+")
    sql.set_defaults(func=cmd_sql)
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
