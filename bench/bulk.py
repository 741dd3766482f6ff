"""Bulk copy bench (issue 18): one table, MariaDB -> PostgreSQL and PostgreSQL -> PostgreSQL, by
every tool a user might pick, on the same fresh data in one run, each copy checked by value.

    .venv/bin/python -m bench.bulk [--rows 1000000] [--skip-duckdb] [--skip-jdbc]
                                   [--skip-fresh] [--skip-cdc] [--cdc-batch-rows LIST]
                                   [--duckdb-python PATH] [--keep]

Servers: a private MariaDB and a private PostgreSQL (bench.mysql.Servers: fsync-light). The
source is bench.mysql's srcdb.orders (bigint key, int, decimal(12,2), two varchars with NULL,
'', 'NULL', tabs, newlines, backslashes and non-ASCII, datetime(6)); the first pipe copies it
into PostgreSQL database pgsrc, which is then the PostgreSQL source. Every target is an empty
PostgreSQL `orders` table with its primary key. Copies, in this order:

- pipe: `mariadb --quick --batch --raw` | `psql \\copy` (twice, mean) and `psql COPY TO` |
  `psql COPY FROM` (the physical limit here);
- DuckDB 1.4.4 (a venv made under the temporary directory with duckdb-ext-mysql /
  duckdb-ext-postgres, or --duckdb-python): ATTACH both, INSERT ... SELECT, timed from ATTACH;
- Spark's own JDBC (Debian's libmariadb-java and libpostgresql-jdbc-java in /usr/share/java:
  `apt-get install libmariadb-java libpostgresql-jdbc-java`), 2 partitions on id, in a fresh
  Python process (bench.jdbccopy): 'fresh' is that process's launch to its first copy's end,
  'warm' its second copy, a second job in the same session;
- connectql, `connectql run copy.sql` as a fresh process (a bulk run-once source and sink),
  launch to exit;
- connectql on a warm worker in this process (its SparkSession started beforehand, a small
  warm-up copy first): bulk source + sink (`run = 'once'`, 'tasks.max' = 2) from the first
  CREATE until both are FINISHED, and a cdc source (snapshot) + continuous upsert sink until
  the target holds every row, twice: the sink riding the source (chaining), then as a query of
  its own (SET sink.chaining = false); that pair once per --cdc-batch-rows value ('default':
  the source's own batch.rows).

Check: row count plus the sum of 60 bits of the MD5 of each row's canonical text, computed by
MariaDB on the source and by PostgreSQL on each target (bench.mysql's checksums). Peak memory: the
sum of the proportional set sizes (PSS) of the copying process tree (this process with its JVM
and Python workers for the warm worker, the private servers left out; the child's tree
otherwise), sampled every 0.1 s. Timings are
reported, never judged; the exit status is 1 when a check failed."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from bench import common, mysql
from bench.common import BULK_SQL, TASKS, WARMUP_ROWS, Connectql, check_text, console, load

DUCKDB_PACKAGES = (
    "duckdb==1.4.4",
    "duckdb-ext-mysql==1.4.4.20260205",
    "duckdb-ext-postgres==1.4.4.20260205",
)
JARS = ("/usr/share/java/mariadb-java-client.jar", "/usr/share/java/postgresql.jar")
SAMPLE_S = 0.1
SOURCES = ("mariadb", "postgres")


@dataclass
class Copy:
    method: str
    source: str  # 'mariadb' | 'postgres'
    seconds: float
    check: str
    rss: int = 0  # peak bytes of the copying process tree; 0: not measured
    note: str = ""
    cpu: dict[str, float] = field(default_factory=dict)  # common.cpu_since; empty: not measured

    @property
    def ok(self) -> bool:
        return self.check.startswith("OK")


# --------------------------------------------------------------------------------------------
# Peak RSS of a process tree
# --------------------------------------------------------------------------------------------


class TreeRss(threading.Thread):
    """Samples the summed memory (PSS, tree_rss_by) of `root` and its descendants every SAMPLE_S; `peak()` since the
    last `reset()`, and `parts`: that peak by program."""

    def __init__(self, root: int, leave_out=tuple):
        super().__init__(daemon=True, name="rss-sampler")
        self.root, self.top, self.done = root, 0, threading.Event()
        self.leave_out = leave_out  # () -> pids whose trees are not the copy's (the servers)
        self.parts: dict[str, int] = {}

    def sample(self) -> None:
        parts = tree_rss_by(self.root, set(self.leave_out()))
        if sum(parts.values()) >= self.top:
            self.top, self.parts = sum(parts.values()), parts

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            self.sample()

    def reset(self) -> None:
        self.top, self.parts = 0, {}
        self.sample()

    def peak(self) -> int:
        self.sample()
        return self.top

    def parts_text(self) -> str:
        """The peak by program, e.g. 'at peak: java 2.1 GB, python workers 0.6 GB, ...'."""
        ranked = sorted(self.parts.items(), key=lambda kv: -kv[1])
        return "at peak: " + ", ".join(f"{k} {v / 2**30:.1f} GB" for k, v in ranked)

    def stop(self) -> int:
        self.done.set()
        self.join(5)
        return self.top


def tree_rss_by(root: int, leave_out: set[int] = frozenset()) -> dict[str, int]:
    """The memory (PSS) of `root` and its descendants but the trees of `leave_out`, by program:
    `root` itself, java, the Python processes under it, others by name."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            names[int(entry)] = stat[stat.find("(") + 1 : stat.rfind(")")]
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == pid and p not in tree | leave_out]
        tree.update(kids)
        frontier += kids
    page = os.sysconf("SC_PAGE_SIZE")
    by: dict[str, int] = {}
    for pid in tree:
        name = names.get(pid, "?")
        label = "this process" if pid == root else "python workers" if "python" in name else name
        rss = pss(pid, page)
        if rss is not None:
            by[label] = by.get(label, 0) + rss
    return by


def pss(pid: int, page: int) -> int | None:
    """A process's proportional set size (pages it shares, e.g. Python workers forked from
    one daemon, counted once across the sharers), else its RSS."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
    except (OSError, IndexError, ValueError):
        return None


def run_child(cmd: list[str], env: dict | None = None, timeout: float = 1800) -> tuple:
    """(returncode, stdout, stderr, seconds from launch to exit, peak memory of its tree (PSS))."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = TreeRss(proc.pid)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    except BaseException:  # interrupted: the child goes too
        proc.terminate()
        proc.wait(60)
        raise
    seconds = time.time() - t0
    return proc.returncode, out, err, seconds, sampler.stop(), t0


# --------------------------------------------------------------------------------------------
# The data: MariaDB's srcdb.orders and its PostgreSQL copy pgsrc.orders
# --------------------------------------------------------------------------------------------


class Data:
    """The servers, the expected checksums and each target's check."""

    def __init__(self, srv: mysql.Servers, rows: int):
        self.srv, self.rows = srv, rows
        self.want = self.want_warm = (0, 0)

    def fill(self, warm: int) -> None:
        self.want = mysql.fill_source(self.srv, self.rows, warm)
        self.want_warm = self.srv.my_checksum("orders_warm")

    def target(self, db: str) -> str:
        """An empty PostgreSQL database `db` with an empty orders table; its conninfo."""
        return self.srv.pg_create(db)

    def check(self, db: str, want=None) -> str:
        return check_text(self.srv.pg_checksum(self.srv.pg_info(db)), want or self.want)

    def pg_source_warm(self, warm: int) -> None:
        """pgsrc.orders_warm: the first `warm` rows, for the warm-up copy from PostgreSQL."""
        info = self.srv.pg_info("pgsrc")
        common.execute(info, mysql.PG_TABLE_DDL.format(name="orders_warm"))
        common.execute(info, "INSERT INTO orders_warm SELECT * FROM orders WHERE id <= %s", (warm,))
        common.execute(info, "VACUUM (FREEZE, ANALYZE) orders")
        common.execute(info, "VACUUM (FREEZE, ANALYZE) orders_warm")

    def source_options(self, source: str) -> str:
        if source == "mariadb":
            return self.srv.my_options()
        return self.srv.pg_options("pgsrc")


def connector_type(source: str) -> str:
    return "mysql" if source == "mariadb" else "postgres"


# --------------------------------------------------------------------------------------------
# The yardsticks
# --------------------------------------------------------------------------------------------


def pipe_mariadb(data: Data, db: str, label: str) -> Copy:
    data.target(db)
    run = common.run_pipe(
        data.srv.mariadb_command(mysql.PIPE_SELECT),
        data.srv.psql_command(db, r"\copy orders FROM STDIN"),
        label,
        data.rows,
        lambda: data.check(db),
        "",
    )
    return Copy(label, "mariadb", run.seconds, run.check, cpu=run.cpu)


def pipe_postgres(data: Data, db: str) -> Copy:
    data.target(db)
    run = common.run_pipe(
        data.srv.psql_command("pgsrc", "COPY orders TO STDOUT"),
        data.srv.psql_command(db, "COPY orders FROM STDIN"),
        "pipe",
        data.rows,
        lambda: data.check(db),
        "",
    )
    return Copy("pipe psql COPY | psql COPY", "postgres", run.seconds, run.check, cpu=run.cpu)


def duckdb_python(tmp: Path, given: str | None) -> tuple[str | None, str]:
    """The python of a venv with duckdb 1.4.4 and its mysql/postgres extensions, or (None,
    why not)."""
    if given:
        return given, ""
    venv = tmp / "duckdb-venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    python = venv / "bin" / "python"
    if made.returncode:
        return None, f"cannot make a venv: {made.stderr.strip()[:200]}"
    pip = [str(python), "-m", "pip", "install", "-q", *DUCKDB_PACKAGES]
    got = subprocess.run(pip, capture_output=True, text=True)
    if got.returncode:
        return None, f"pip install {' '.join(DUCKDB_PACKAGES)} failed: {got.stderr[-300:]}"
    return str(python), ""


def duckdb_copy(data: Data, python: str, source: str) -> Copy:
    db = f"duck_{source}"
    data.target(db)
    pg, my = data.srv.pg, data.srv.my
    src = (
        f"host={my.host} port={my.port} user={my.user} database=srcdb"
        if source == "mariadb"
        else f"host={pg.host} port={pg.port} user={pg.user} dbname=pgsrc"
    )
    spec = {
        "kind": connector_type(source),
        "source": src,
        "target": f"host={pg.host} port={pg.port} user={pg.user} dbname={db}",
        "table": "orders" if source == "mariadb" else "public.orders",
    }
    script = str(Path(__file__).with_name("duckcopy.py"))
    code, out, err, _s, rss, _t0 = run_child([python, script, json.dumps(spec)])
    if code:
        return Copy("DuckDB 1.4.4 ATTACH, INSERT ... SELECT", source, 0.0, f"FAIL: {err[-300:]}")
    times = json.loads(out.strip().splitlines()[-1])
    seconds = times["end"] - times["start"]
    return Copy("DuckDB 1.4.4 ATTACH, INSERT ... SELECT", source, seconds, data.check(db), rss)


def spark_jdbc(data: Data, source: str) -> list[Copy]:
    """A fresh process: its first copy (from launch) and a second one (warm)."""
    pg, my = data.srv.pg, data.srv.my
    if source == "mariadb":
        src = {"url": f"jdbc:mysql://{my.host}:{my.port}/srcdb", "user": my.user}
    else:
        src = {"url": f"jdbc:postgresql://{pg.host}:{pg.port}/pgsrc", "user": pg.user}
    dbs = [f"jdbc_{source}_fresh", f"jdbc_{source}_warm"]
    for db in dbs:
        data.target(db)
    spec = {
        "source": {**src, "table": "orders"},
        "targets": [
            {
                "url": f"jdbc:postgresql://{pg.host}:{pg.port}/{db}",
                "user": pg.user,
                "table": "orders",
            }
            for db in dbs
        ],
        "partitions": TASKS,
        "lower": 1,
        "upper": data.rows,
    }
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    cmd = [sys.executable, "-m", "bench.jdbccopy", json.dumps(spec)]
    code, out, err, _s, rss, t0 = run_child(cmd, env)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    copies = {x["copy"]: x for x in lines if "copy" in x}
    if code or len(copies) < 2:
        cause = [x for x in err.splitlines() if "Exception:" in x] or [err.strip()[-300:]]
        why = f"FAIL: exit {code}: {cause[-1][:300]}"
        return [Copy("Spark JDBC", source, 0.0, why)]
    session = next(x["session"] for x in lines if "session" in x)
    fresh, warm = copies[0], copies[1]
    return [
        Copy(
            "Spark JDBC, fresh python process",
            source,
            fresh["end"] - t0,
            data.check(dbs[0]),
            rss,
            f"session ready {session - t0:.1f} s after launch",
        ),
        Copy(
            "Spark JDBC, warm (2nd job in the session)",
            source,
            warm["end"] - warm["start"],
            data.check(dbs[1]),
            rss,
        ),
    ]


# --------------------------------------------------------------------------------------------
# connectql
# --------------------------------------------------------------------------------------------


def connectql_fresh(data: Data, tmp: Path, source: str) -> Copy:
    """`connectql run copy.sql` in a fresh process and home: launch to exit."""
    db = f"fresh_{source}"
    data.target(db)
    script = tmp / f"copy_{source}.sql"
    script.write_text(
        BULK_SQL.format(
            src="copy_src",
            dst="copy_dst",
            source=connector_type(source),
            stream="copy_s",
            table="orders",
            conn_src=data.source_options(source),
            conn_dst=data.srv.pg_options(db),
            batch=common.BATCH_ROWS,
            tasks=TASKS,
        )
    )
    exe = Path(sys.executable).with_name("connectql")
    cmd = [str(exe), "--home", str(tmp / f"fresh-{source}"), "run", str(script)]
    code, _out, err, seconds, rss, _t0 = run_child(cmd)
    check = data.check(db) if code == 0 else f"FAIL: exit {code}: {err.strip()[-300:]}"
    return Copy("connectql run copy.sql, fresh process (bulk)", source, seconds, check, rss)


def connectql_warm(
    cq: Connectql, data: Data, rss: TreeRss, source: str, cdc_rows: list[int | None]
) -> list[Copy]:
    """The bulk copy, then the cdc copy for each batch.rows of `cdc_rows` (None: the source's
    default), the sink riding its source and as a query of its own."""
    cq.source = connector_type(source)
    options = data.source_options(source)
    tag = source[:2]
    data.target(f"warm_{tag}")
    cq.bulk(
        f"w{tag}",
        "orders_warm",
        WARMUP_ROWS,
        options,
        data.srv.pg_options(f"warm_{tag}"),
        lambda: "OK",
    )
    out = []
    db = f"bulk_{tag}"
    data.target(db)
    rss.reset()
    run = cq.bulk(
        f"b{tag}", "orders", data.rows, options, data.srv.pg_options(db), lambda: data.check(db)
    )
    peak = rss.peak()
    out.append(Copy("connectql bulk + sink, warm worker", source, run.seconds, run.check,
                    peak, f"{run.note}; {rss.parts_text()}", run.cpu))  # fmt: skip
    for batch_rows in cdc_rows:
        for chained in (True, False):
            out.append(cdc_copy(cq, data, rss, source, options, chained, batch_rows))
    return out


def cdc_copy(
    cq: Connectql,
    data: Data,
    rss: TreeRss,
    source: str,
    options: str,
    chained: bool,
    batch_rows: int | None,
) -> Copy:
    """The cdc snapshot into a continuous upsert sink, the sink riding the source (chaining,
    runtime/ride.py) or as a query of its own (SET sink.chaining = false)."""
    tag = ("c" if chained else "u") + source[:2] + (f"{batch_rows}" if batch_rows else "")
    db = f"cdc_{tag}"  # and a stream of its own: a stream outlives its connectors
    info = data.target(db)
    cq.run(f"SET sink.chaining = {str(chained).lower()}")
    rss.reset()
    run = cq.cdc(
        data.rows,
        options,
        data.srv.pg_options(db),
        info,
        lambda: data.check(db),
        timeout=max(600.0, data.rows / 1000),
        label=tag,
        batch_rows=batch_rows,
    )
    cq.run("SET sink.chaining = true")
    for name in (f"{tag}_src", f"{tag}_dst"):  # stop it loading the machine
        cq.run(f"DROP CONNECTOR IF EXISTS {name};")
    how = "the sink riding the source" if chained else "two queries"
    peak = rss.peak()
    return Copy(f"connectql cdc snapshot + upsert sink, warm worker, {how}", source,
                run.seconds, run.check, peak, f"{run.note}; {rss.parts_text()}")  # fmt: skip


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


def copies_table(copies: list[Copy], rows: int) -> Table:
    pipes = {s: [c.seconds for c in copies if c.source == s and c.method.startswith("pipe")
                 and c.ok] for s in SOURCES}  # fmt: skip
    pipe = {s: statistics.fmean(v) if v else float("nan") for s, v in pipes.items()}
    jdbc = {
        s: next((c.seconds for c in copies if c.source == s and "JDBC, warm" in c.method
                 and c.ok), float("nan"))
        for s in SOURCES
    }  # fmt: skip
    table = Table(
        title="bulk copy into PostgreSQL, one run",
        title_justify="left",
        caption="x pipe: seconds / the mean of that source's pipe runs; x JDBC: / Spark JDBC's"
        " warm copy from the same source; peak memory: PSS of the copying process tree (pages"
        " shared by its processes counted once; the database servers left out; - not measured);"
        " check: row count + MD5 over canonical values against the source; CPU s: the"
        " machine's busy CPU seconds during the copy (at most seconds x cores), then by program"
        " (a program's reaped children count as its own)",
        caption_justify="left",
    )
    for col in ("copy", "source", "seconds", "rows/s", "x pipe", "x JDBC warm", "peak memory"):
        table.add_column(col, justify="left" if col in ("copy", "source") else "right")
    table.add_column("check")
    table.add_column("CPU s (machine busy: by program)", overflow="fold")
    table.add_column("note", overflow="fold")
    for c in copies:
        table.add_row(
            c.method,
            c.source,
            f"{c.seconds:.2f}",
            f"{rows / c.seconds:,.0f}" if c.ok and c.seconds > 0 else "-",
            f"{c.seconds / pipe[c.source]:.2f}",
            f"{c.seconds / jdbc[c.source]:.2f}",
            f"{c.rss / 2**20:,.0f} MB" if c.rss else "-",
            c.check if c.ok else f"[red]{c.check}[/red]",
            common.cpu_text(c.cpu),
            c.note,
        )
    return table


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.bulk", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in srcdb.orders")
    p.add_argument("--skip-duckdb", action="store_true", help="no DuckDB yardstick")
    p.add_argument("--skip-jdbc", action="store_true", help="no Spark JDBC yardstick")
    p.add_argument("--skip-fresh", action="store_true", help="no fresh `connectql run`")
    p.add_argument("--skip-cdc", action="store_true", help="no cdc snapshot runs")
    p.add_argument(
        "--cdc-batch-rows",
        default="default",
        help="the cdc copies' batch.rows, comma-separated ('default': the source's own);"
        " each one is a pair of cdc copies",
    )
    p.add_argument("--duckdb-python", help="a python with duckdb 1.4.4 and its extensions")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    if args.rows < WARMUP_ROWS:
        p.error(f"--rows must be at least {WARMUP_ROWS}")
    return args


def cdc_rows(args) -> list[int | None]:
    """--cdc-batch-rows as values (None: the source's default)."""
    given = [x.strip() for x in args.cdc_batch_rows.split(",") if x.strip()]
    return [None if x == "default" else int(x) for x in given]


def yardsticks(args, data: Data, tmp: Path) -> list[Copy]:
    copies = [pipe_postgres(data, "pipe_pg")]
    copies.append(pipe_mariadb(data, "pipe_my", "pipe mariadb --batch --raw | psql \\copy (2nd)"))
    if args.skip_duckdb:
        console.print("  DuckDB skipped (--skip-duckdb)")
    else:
        python, why = duckdb_python(tmp, args.duckdb_python)
        if python is None:
            console.print(f"  [yellow]DuckDB skipped: {why}[/yellow]")
        else:
            copies += [duckdb_copy(data, python, s) for s in SOURCES]
    missing = [j for j in JARS if not Path(j).exists()]
    if args.skip_jdbc:
        console.print("  Spark JDBC skipped (--skip-jdbc)")
    elif missing:
        console.print(
            f"  [yellow]Spark JDBC skipped: no {', '.join(missing)} (apt-get install"
            " libmariadb-java libpostgresql-jdbc-java)[/yellow]"
        )
    else:
        for source in SOURCES:
            copies += spark_jdbc(data, source)
    for c in copies:
        console.print(f"  {c.method} ({c.source}): {c.seconds:.2f} s, {c.check}")
    return copies


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    missing = [c for c in ("mariadb", "psql") if shutil.which(c) is None]
    if missing:
        console.print(f"[red]{' and '.join(missing)} not on PATH: the pipe needs them[/red]")
        return 2
    signal.signal(signal.SIGTERM, common.interrupt)
    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-bulk-"))
    console.print(
        f"[bold]bulk bench[/bold]: {args.rows:,} rows, {os.cpu_count()} cores; temporary"
        f" directory {tmp}; load average {load()}"
    )
    srv = mysql.Servers()
    cq: Connectql | None = None
    # the private servers are this process's children too: their memory is not the copy's
    rss = TreeRss(os.getpid(), lambda: [p for p in (srv.my._main_pid(), srv.pg._main_pid()) if p])
    copies: list[Copy] = []
    try:
        srv.start()
        data = Data(srv, args.rows)
        data.fill(WARMUP_ROWS)
        copies.append(pipe_mariadb(data, "pgsrc", "pipe mariadb --batch --raw | psql \\copy (1st)"))
        data.pg_source_warm(WARMUP_ROWS)
        copies += yardsticks(args, data, tmp)
        if not args.skip_fresh:
            for source in SOURCES:
                copies.append(connectql_fresh(data, tmp, source))
                console.print(f"  {copies[-1].method} ({source}): {copies[-1].seconds:.2f} s")
        cq = Connectql(tmp / "home", "mysql")
        console.print(f"  the warm worker's SparkSession started in {cq.session_s:.1f} s")
        rss.start()
        for source in SOURCES:
            for c in connectql_warm(cq, data, rss, source, [] if args.skip_cdc else cdc_rows(args)):
                copies.append(c)
                console.print(f"  {c.method} ({source}): {c.seconds:.2f} s, {c.check}")
        console.print(copies_table(copies, args.rows))
        for label, phases in cq.phases.items():
            if not label.startswith("w"):
                console.print(common.phases_table(f"{label}: Spark's batches", phases))
    except KeyboardInterrupt:
        console.print("[red]interrupted: stopping the worker and the servers[/red]")
        copies.append(Copy("interrupted", "-", 0.0, "FAIL: interrupted"))
    finally:
        rss.done.set()
        common.close(cq, srv.stop, tmp, args.keep)
    console.print(f"bench took {time.time() - started:.0f} s; load average {load()}")
    return 0 if copies and all(c.ok for c in copies) else 1


if __name__ == "__main__":
    sys.exit(main())
