"""The active worker's lease in the home: who is active (epoch, address, catalog file), renewed
every RENEW_S by atomic rename; an epoch is taken by creating its file exclusively, so two
standbys never take the same one, and a worker that sees a newer epoch knows it lost."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from connectql.errors import ConnectQLError
from connectql.worker.home import LEASE_FILE, TTL_S, is_held, is_live, read_lease

log = logging.getLogger("connectql.lease")

EPOCHS_DIR = "epochs"  # one empty file per epoch ever taken
CATALOG_FILE = "catalog.duckdb"
RENEW_S = 2.0


def write_lease(home: Path, lease: dict) -> None:
    tmp = home / f"{LEASE_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(lease))
    os.replace(tmp, home / LEASE_FILE)


def current_epoch(home: Path) -> int:
    try:
        return max(
            (int(p.name) for p in (home / EPOCHS_DIR).iterdir() if p.name.isdigit()), default=0
        )
    except OSError:
        return 0


def take_epoch(home: Path) -> int:
    """The next epoch, taken by this process (O_EXCL: of two takers of one epoch, one wins and
    the other tries the next)."""
    (home / EPOCHS_DIR).mkdir(mode=0o700, exist_ok=True)
    while True:
        epoch = current_epoch(home) + 1
        try:
            os.close(os.open(home / EPOCHS_DIR / str(epoch), os.O_CREAT | os.O_EXCL, 0o600))
            return epoch
        except FileExistsError:
            continue


def catalog_file(home: Path) -> str:
    """The catalog file the lease names (catalog.duckdb when there has been no takeover)."""
    lease = read_lease(home)
    return (lease or {}).get("catalog") or CATALOG_FILE


def claim_catalog(home: Path, epoch: int) -> str:
    """The catalog file for a worker that took `epoch`: the lease's, unless a worker that lost
    its lease still has it open (a paused process keeps DuckDB's lock): then a copy of it (as a
    kill -9 would have left it), so that nothing the old worker writes reaches the new one."""
    name = catalog_file(home)
    if not (home / name).exists():
        return name
    try:
        duckdb.connect(str(home / name)).close()
        return name
    except duckdb.IOException as e:
        if "lock" not in str(e).lower():
            raise
    copy = f"catalog-e{epoch}.duckdb"
    for suffix in ("", ".wal"):
        src, dst = home / (name + suffix), home / (copy + suffix)
        if src.exists():
            dst.write_bytes(src.read_bytes())
    log.warning(
        "the catalog %s is held by a worker that lost its lease: using a copy, %s", name, copy
    )
    return copy


def prune_catalogs(home: Path, keep: str) -> list[str]:
    """Remove the catalog files of earlier epochs (all but `keep`) that no process holds any
    more: a worker that lost its lease leaves its file locked until it exits. The names removed."""
    removed = []
    for path in home.glob("catalog*.duckdb"):
        if path.name == keep or not re.fullmatch(r"catalog(-e\d+)?\.duckdb", path.name):
            continue
        try:
            duckdb.connect(str(path)).close()
        except duckdb.Error:
            continue  # still held (or unreadable): left for a later pass
        for suffix in ("", ".wal"):
            (home / (path.name + suffix)).unlink(missing_ok=True)
        removed.append(path.name)
    if removed:
        log.info("removed the catalog files of earlier workers: %s", ", ".join(sorted(removed)))
    return removed


class Lease:
    """Held by the active worker: renewed every RENEW_S in a thread. When another worker took a
    newer epoch, `on_lost(epoch)` is called once and renewals stop."""

    def __init__(self, home: Path, epoch: int, catalog: str, on_lost: Callable[[int], None]):
        self.home, self.epoch, self.catalog, self.on_lost = home, epoch, catalog, on_lost
        self.address: dict = {}
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renew()

    def start(self, address: dict) -> None:
        self.address = address
        self.renew()
        self._thread = threading.Thread(target=self._loop, name="connectql-lease", daemon=True)
        self._thread.start()

    def renew(self) -> bool:
        """Write the lease again, unless a newer epoch was taken: then it is lost."""
        newer = current_epoch(self.home)
        if newer > self.epoch:
            if not self.lost:
                self.lost = True
                log.error("lost the lease: epoch %d was taken after ours (%d)", newer, self.epoch)
                self.on_lost(newer)
            return False
        write_lease(
            self.home,
            {
                "epoch": self.epoch,
                "pid": os.getpid(),
                "machine": socket.gethostname(),
                "renewed": time.time(),
                "catalog": self.catalog,
                **self.address,
            },
        )
        return True

    def _loop(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                if not self.renew():
                    return
                prune_catalogs(self.home, self.catalog)
            except OSError as e:  # the home's storage went away: the lease lapses
                log.error("cannot renew the lease in %s: %s", self.home, e)

    def release(self) -> None:
        """Stop renewing; a lease still ours says released, so that a standby takes over now."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        lease = read_lease(self.home)
        if not self.lost and lease and lease.get("epoch") == self.epoch:
            write_lease(self.home, {**lease, "released": True})


def wait_for_lapse(home: Path, stopping: threading.Event, every: float = 0.25) -> int | None:
    """Wait until the home has no live active worker, then take the next epoch and return it
    (None when `stopping` is set first). A lease lapses when it is released, or has not changed
    for TTL_S by this process's clock; a home without a lease, when no worker holds its lock
    (`connectql run` holds no lease)."""
    seen, since = None, time.monotonic()
    while not stopping.is_set():
        lease = read_lease(home)
        key = None if lease is None else (lease["epoch"], lease.get("renewed"))
        if key != seen:
            seen, since = key, time.monotonic()
        if lease is None:
            lapsed = not is_held(home)
        else:
            lapsed = bool(lease.get("released")) or time.monotonic() - since > TTL_S
        if lapsed:
            return take_epoch(home)
        stopping.wait(every)
    return None


def refuse_if_active(home: Path) -> None:
    """An error naming the live active worker of `home`, if there is one (on another machine
    sharing the home, whose lock this machine cannot see)."""
    lease = read_lease(home)
    if is_live(lease) and lease.get("pid") != os.getpid():
        raise ConnectQLError(
            f"an active connectql worker (epoch {lease['epoch']}, pid {lease.get('pid')},"
            f" {lease.get('url', 'no address')}) holds the lease of {home}: stop it, or start"
            " this one with --standby"
        )
