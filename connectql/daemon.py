"""`connectql start` / `connectql stop`: a `connectql server` in the background for a home, as
`pg_ctl start/stop` do: its output in the home's server.log, started once /health answers,
stopped with SIGTERM (graceful: queries stop, offsets are kept)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from connectql.errors import ConnectQLError
from connectql.processes import alive
from connectql.worker.home import held_by, is_held, read_address

LOG_FILE = "server.log"


def start(home: Path, host: str, port: int, token_file: str | None, timeout: float) -> dict:
    """Start the server; its address ({"url", "pid", ...}) once /health answers. An error with
    the log's tail when it exits or does not answer within `timeout` seconds."""
    running = read_address(home)
    if running:
        raise ConnectQLError(
            f"a connectql server already serves {home} at {running['url']} (pid"
            f" {running['pid']}); connectql stop stops it"
        )
    if is_held(home):
        raise ConnectQLError(held_by(home))
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = home / LOG_FILE
    command = [sys.executable, "-m", "connectql.cli", "--home", str(home)]
    if token_file:
        command += ["--token-file", token_file]
    command += ["server", "--host", host, "--port", str(port)]
    with open(log_path, "ab") as log:
        log.write(f"--- connectql start {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not stopped by a Ctrl-C meant for this terminal
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConnectQLError(
                f"the server exited with {proc.returncode} while starting;"
                f" the end of {log_path}:\n{tail(log_path)}"
            )
        address = read_address(home)
        if address and address.get("pid") == proc.pid and _healthy(address["url"], token_file):
            return address
        time.sleep(0.2)
    proc.terminate()
    raise ConnectQLError(
        f"the server did not answer within {timeout:.0f} s and was stopped;"
        f" the end of {log_path}:\n{tail(log_path)}"
    )


def _healthy(url: str, token_file: str | None) -> bool:
    from connectql.api.client import Remote, token

    try:
        status, _ = Remote(url, token(token_file), timeout=5).request("GET", "/health")
        return status == 200
    except ConnectQLError:
        return False


def stop(home: Path, timeout: float) -> int:
    """SIGTERM to the server serving `home`, then wait until it is gone; its pid."""
    address = read_address(home)
    if address is None:
        if is_held(home):
            raise ConnectQLError(held_by(home))
        raise ConnectQLError(f"no connectql server serves {home}")
    pid = int(address["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid) and not is_held(home):
            return pid
        time.sleep(0.2)
    raise ConnectQLError(
        f"the server (pid {pid}) did not stop within {timeout:.0f} s; `kill -9 {pid}` loses"
        " nothing committed (its connectors resume from their checkpoints on the next start)"
    )


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
