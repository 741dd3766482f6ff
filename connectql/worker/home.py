"""One worker per home: an exclusive lock held for the worker's life, the address file through
which other `connectql` commands find a running server, and the active worker's lease as those
commands read it."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from connectql.errors import ConnectQLError

LOCK_FILE = "worker.lock"
ADDRESS_FILE = "server.json"


def default_home_text() -> str:
    """The home as given by CONNECTQL_HOME, else ./.connectql (before it is resolved)."""
    return os.environ.get("CONNECTQL_HOME", ".connectql")


def default_home() -> Path:
    return Path(default_home_text()).resolve()


def home_of(given: str | None) -> Path:
    return Path(given).resolve() if given else default_home()


class HomeLock:
    """An exclusive `flock` on `$CONNECTQL_HOME/worker.lock`. The kernel releases it when the
    process dies, even by kill -9, so a stale lock never blocks a restart."""

    def __init__(self, home: Path, required: bool = True):
        """`required` False: a standby that took the lease over goes on without the lock when
        the worker that lost the lease still holds it (a paused process)."""
        self.home = home
        self.fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            if required:
                raise ConnectQLError(held_by(home)) from None
            return
        os.ftruncate(self.fd, 0)
        os.write(self.fd, str(os.getpid()).encode())

    def release(self) -> None:
        if self.fd is not None:
            remove_address(self.home)
            os.close(self.fd)
            self.fd = None


def held_by(home: Path) -> str:
    """Who holds the home: the other worker's pid and, for a server, its address."""
    try:
        pid = (home / LOCK_FILE).read_text().strip() or "?"
    except OSError:
        pid = "?"
    address = read_address(home)
    if address and str(address.get("pid")) == pid:
        return (
            f"another connectql worker (pid {pid}, serving {address['url']}) is using {home}:"
            " connectql sql/status/shell talk to it; stop it before starting another"
        )
    return (
        f"another connectql worker (pid {pid}) is using {home} without an API (connectql run"
        " or sql): wait for it or stop it; to share a home, run it as connectql server"
    )


def write_address(home: Path, host: str, port: int, scheme: str = "http") -> str:
    url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"
    tmp = home / (ADDRESS_FILE + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "host": host, "port": port, "url": url}))
    os.replace(tmp, home / ADDRESS_FILE)
    return url


def read_address(home: Path) -> dict | None:
    """The running server's address, or None when there is none: no file, or no worker holds
    the home any more (a server killed with -9 leaves its file behind). The active worker's
    lease names it too (after a takeover, the lock may be held by a paused worker, or none)."""
    lease = read_lease(home)
    if is_live(lease) and lease.get("url"):
        return {k: lease[k] for k in ("pid", "host", "port", "url") if k in lease}
    try:
        address = json.loads((home / ADDRESS_FILE).read_text())
        address["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return address if is_held(home) else None


def is_held(home: Path) -> bool:
    """Whether a worker holds the home's lock now (probed with a shared lock, released at once)."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def remove_address(home: Path) -> None:
    try:
        if json.loads((home / ADDRESS_FILE).read_text()).get("pid") == os.getpid():
            (home / ADDRESS_FILE).unlink()
    except (OSError, ValueError):
        pass


# The active worker's lease (worker/lease.py writes and renews it), as commands read it.
LEASE_FILE = "lease.json"
TTL_S = 6.0  # a lease not renewed for this long has lapsed


def read_lease(home: Path) -> dict | None:
    try:
        lease = json.loads((home / LEASE_FILE).read_text())
        return lease if isinstance(lease, dict) and "epoch" in lease else None
    except (OSError, ValueError):
        return None


def is_live(lease: dict | None) -> bool:
    """Whether a lease was renewed within TTL_S by the wall clock and its holder, when on this
    machine, still runs (for commands that look once; a standby judges by its own clock how long
    the lease has not changed)."""
    if not lease or lease.get("released") or time.time() - lease.get("renewed", 0) >= TTL_S:
        return False
    here = lease.get("machine") == socket.gethostname()
    return not here or Path(f"/proc/{lease.get('pid')}").exists()
