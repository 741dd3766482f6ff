"""What the private database servers of the tests share: a temp dir, a free port (another one
on a clash), the log tail in errors, a stop at exit, halt()/resume() for outages,
suspend()/unsuspend() for a server that hangs, and one server per process for a session
fixture imported into several modules."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateServer:
    """Subclasses provide `_prepare()` (initialise the data dir), `_start_server(attempt)`
    (start and wait; returns (error or '', whether it was a port clash)) and
    `_halt_server(graceful)`."""

    host = "127.0.0.1"
    prefix = "connectql-server-"

    def __init__(self, extra_settings: dict[str, str] | None = None, timeout: float = 30.0):
        self.port: int | None = None
        self.timeout = timeout
        self.extra_settings = dict(extra_settings or {})
        self.base: str | None = None
        self.datadir: str | None = None
        self.logfile: str | None = None
        self._running = False

    def _prepare(self) -> None:
        raise NotImplementedError

    def _start_server(self, attempt: int) -> tuple[str, bool]:
        raise NotImplementedError

    def _halt_server(self, graceful: bool = False) -> None:
        raise NotImplementedError

    def _main_pid(self) -> int | None:
        """The server's main process (its children are found from it)."""
        raise NotImplementedError

    def _log_tail(self, n: int = 40) -> str:
        if not self.logfile or not os.path.exists(self.logfile):
            return "(no log)"
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError as e:
            return f"(cannot read log: {e})"

    def start(self):
        if self._running:
            return self
        self.base = tempfile.mkdtemp(prefix=self.prefix, dir="/tmp")
        os.chmod(self.base, 0o755)
        self.datadir = os.path.join(self.base, "data")
        try:
            self._prepare()
            for attempt in range(3):  # retry if the chosen port got taken in the meantime
                self.port = free_port()
                err, port_clash = self._start_server(attempt)
                if not err:
                    self._running = True
                    atexit.register(self.stop)  # in case the fixture's teardown never runs
                    return self
                self._halt_server()
                if not port_clash or attempt == 2:
                    raise RuntimeError(err)
        except BaseException:
            try:
                self._halt_server()
            finally:
                self._cleanup_dir()
            raise
        raise AssertionError("unreachable")

    def halt(self, graceful: bool = False) -> None:
        """Stop the server and keep its data: an outage, until resume(). By default like a
        crash; graceful=True shuts it down cleanly."""
        self._halt_server(graceful)

    def resume(self) -> None:
        """Start a halted server again, on the same port."""
        error, _clash = self._start_server(attempt=99)
        if error:
            self._halt_server()
            raise RuntimeError(error)

    def pids(self) -> list[int]:
        """The server's processes: the main one and its children."""
        main = self._main_pid()
        if main is None:
            return []
        kids = subprocess.run(["pgrep", "-P", str(main)], capture_output=True, text=True)
        return [main, *(int(p) for p in kids.stdout.split())]

    @contextmanager
    def suspended(self) -> Iterator[list[int]]:
        """Every process of the server stopped (SIGSTOP) while inside: it keeps its sockets
        but answers nothing, like a frozen VM or a network black hole. Always resumed."""
        stopped = self.suspend()
        try:
            yield stopped
        finally:
            self.unsuspend(stopped)

    def suspend(self) -> list[int]:
        """SIGSTOP every process of the server; returns them for unsuspend()."""
        stopped = []
        try:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:  # a backend that ended since it was listed
                    continue
                stopped.append(pid)
            assert stopped, f"no process of the server to suspend:\n{self._log_tail()}"
            _wait_stopped(stopped)
        except BaseException:
            self.unsuspend(stopped)
            raise
        atexit.register(self.unsuspend, stopped)  # a test that dies leaves no frozen server
        return stopped

    def unsuspend(self, stopped: list[int]) -> None:
        atexit.unregister(self.unsuspend)
        for pid in dict.fromkeys([*stopped, *self.pids()]):  # and any child made meanwhile
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def process_states(self) -> str:
        """The server's processes with their state (R, S, T: stopped, D: in the kernel)."""
        out = []
        for pid in self.pids():
            fields = stat_fields(Path(f"/proc/{pid}/stat"))
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()
            except OSError:
                cmd = "?"
            out.append(f"{pid} {fields[0] if fields else '?'} {cmd[:80]}")
        return "; ".join(out) or "none"

    def kill_all(self) -> None:
        """SIGKILL every process of the server (a stopped one too), waiting for them to go."""
        pids = self.pids()
        for pid in pids:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _cleanup_dir(self) -> None:
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
        self.base = self.datadir = self.logfile = None

    def stop(self) -> None:
        atexit.unregister(self.stop)
        if not self._running and self.base is None:
            return
        try:
            self._halt_server()
        finally:
            self._running = False
            self._cleanup_dir()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_shared: dict[str, list] = {}  # name -> [server, users]


def mosquitto(folder: Path, settings: str) -> Iterator[str]:
    """A Mosquitto of its own on a free port, its url yielded once it answers: it queues a
    persistent session's messages without limit (the machine's keeps 1000, then drops: its
    default), with `settings` (mosquitto.conf lines) besides; stopped when the generator ends."""
    port = free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nuser root\nmax_queued_messages 0\n{settings}")
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"mqtt://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def shared(name: str, factory: Callable[[], PrivateServer]) -> Iterator[PrivateServer]:
    """One started server per process under `name`, even when a session fixture is imported
    into several modules (pytest then sees several definitions of it): they share it, and the
    last one to finish stops it."""
    entry = _shared.get(name)
    if entry is None:
        entry = _shared[name] = [factory().start(), 0]
    entry[1] += 1
    try:
        yield entry[0]
    finally:
        entry[1] -= 1
        if entry[1] == 0:
            del _shared[name]
            entry[0].stop()


def _wait_stopped(pids: list[int], timeout: float = 10.0) -> None:
    """Until every thread of `pids` is stopped: SIGSTOP takes effect when the kernel next
    schedules them, and on a loaded machine a query sent at once could still be answered."""
    deadline = time.monotonic() + timeout
    while True:
        running = [
            t for pid in pids for t in Path(f"/proc/{pid}/task").glob("*/stat")
            if _state(t) not in ("T", "t", "Z", "X", None)
        ]  # fmt: skip
        if not running or time.monotonic() > deadline:
            assert not running, f"threads still running after SIGSTOP: {running[:5]}"
            return
        time.sleep(0.01)


def _state(stat: Path) -> str | None:
    fields = stat_fields(stat)
    return fields[0] if fields else None


def stat_fields(stat: Path) -> list[str] | None:
    """The fields of a /proc/<pid>[/task/<tid>]/stat after the command (state, ppid, pgrp,
    session, ...); None when the process is gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
