"""`connectql server` and `connectql run`'s API: the app on uvicorn, in a thread beside the
worker, on loopback unless a token guards it; its address goes to $CONNECTQL_HOME so other
commands find it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from connectql.api.app import build
from connectql.api.routes import Routes
from connectql.api.transport import Protocol, listen
from connectql.config import is_secret_key
from connectql.errors import ConnectQLError
from connectql.worker.home import home_of, remove_address, write_address

IDLE_S = 120  # a kept-alive connection left idle this long is closed


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(host: str, token: str | None) -> None:
    if not is_loopback(host) and not token:
        raise ConnectQLError(
            f"--host {host} is not a loopback address: anyone who can reach it could run"
            " statements, so the server needs a token (set CONNECTQL_TOKEN or --token-file)"
            " and refuses to start without one"
        )


@dataclass(frozen=True)
class Tls:
    """The server's certificate chain and private key (PEM files)."""

    cert: str
    key: str

    @staticmethod
    def of(cert: str | None, key: str | None) -> Tls | None:
        """Both files, checked now (a bad one is named before anything starts), or neither."""
        if not cert and not key:
            return None
        if not cert or not key:
            raise ConnectQLError("TLS needs both --tls-cert and --tls-key")
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise ConnectQLError(
                f"cannot use --tls-cert {cert} with --tls-key {key}: {getattr(e, 'strerror', None) or e}"
            ) from None
        return Tls(cert, key)


class ApiServer:
    """The app of `routes` on uvicorn, listening on `address` from the start (port 0: any free
    one, then in server_address); serve_forever until shutdown (from another thread)."""

    def __init__(
        self, address: tuple[str, int], routes: Routes, token: str | None, tls: Tls | None = None
    ):
        self.socket = listen(*address)
        self.server_address = self.socket.getsockname()[:2]
        config = uvicorn.Config(
            build(routes, token),
            http=Protocol,
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_keep_alive=IDLE_S,
            timeout_graceful_shutdown=5,
            ssl_certfile=tls.cert if tls else None,
            ssl_keyfile=tls.key if tls else None,
        )
        self.uvicorn = uvicorn.Server(config)
        self.stopped = threading.Event()

    def serve_forever(self) -> None:
        try:
            asyncio.run(self.uvicorn.serve(sockets=[self.socket]))
        finally:
            self.stopped.set()

    def shutdown(self) -> None:
        self.uvicorn.should_exit = True
        self.stopped.wait(30)

    def server_close(self) -> None:
        self.socket.close()


@contextlib.contextmanager
def serving(worker, host: str, port: int, token: str | None, tls: Tls | None = None):
    """The API of `worker` on host:port (over TLS when `tls` names a certificate and key) while
    the block runs, its address in the home's server.json (so other commands find it); yields
    (url, the routes' statement lock)."""
    routes = Routes(worker, f"{host}:{port}")
    httpd = ApiServer((host, port), routes, token, tls)
    url = write_address(worker.home, host, httpd.server_address[1], "https" if tls else "http")
    routes.worker_id = url.split("://", 1)[1]
    thread = threading.Thread(target=httpd.serve_forever, name="connectql-api", daemon=True)
    thread.start()
    try:
        yield url, routes.statements
    finally:
        remove_address(worker.home)
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def freeze_when_started(worker) -> threading.Thread:
    """Once the SparkSession is up, move the objects the server holds then (modules, classes,
    Spark's and the web stack's state: ~170,000) out of the garbage collector's reach. A full
    collection walked them every time, holding every thread, the API's included: bench.api saw
    pauses of 74-312 ms and a p99 over 150 ms in 4 of 8 runs; frozen, 21-28 ms and 6 of 6 under.
    Only the server's process: a frozen object is never collected, so a process that makes and
    drops workers (a test run) must not freeze them."""

    def freeze() -> None:
        with contextlib.suppress(Exception):  # no session: nothing worth freezing
            worker.engine.spark  # noqa: B018 (waits for the session started early)
            gc.freeze()

    thread = threading.Thread(target=freeze, name="connectql-gc-freeze", daemon=True)
    thread.start()
    return thread


def serve(
    home: str | Path,
    host: str,
    port: int,
    token: str | None,
    say=print,
    tls: Tls | None = None,
    standby: bool = False,
) -> None:
    """Run a worker on `home` behind the API until SIGINT/SIGTERM; every connector whose desired
    state is running is started again from its checkpoint first. The worker holds the home's
    lease; `standby`: first wait for the active worker's lease to lapse (api/standby.py)."""
    from connectql.api.standby import stand_by
    from connectql.runtime.session import stop_session
    from connectql.worker.worker import Worker

    check_host(host, token)
    if standby:
        taken = stand_by(home_of(str(home)), host, port, token, tls, say)
        if taken is None:
            stop_session()
            return
        epoch, port = taken
        say(f"took over {home} with epoch {epoch}")
        worker = Worker(home, epoch=epoch)
    else:  # takes the home's lock: a second worker is refused, naming the first
        worker = Worker(home, leased=True)
    worker.start_session_early()  # ready, or nearly, when the first statement arrives
    try:
        worker.check_cluster()
        with serving(worker, host, port, token, tls) as (url, statements):
            spark = {k: v for k, v in worker.engine.settings.items() if not is_secret_key(k)}
            worker.lease.start({"url": url, "spark": spark})  # the lease is a plain file
            say(f"connectql server on {url} (home {worker.home}, epoch {worker.lease.epoch})")
            with statements:
                resumed = worker.resume_all()
            if resumed:
                say(f"resumed from checkpoints: {', '.join(resumed)}")
            freeze_when_started(worker)
            try:
                while True:
                    time.sleep(3600)
            finally:
                statements.acquire()  # no statement runs while the worker closes
    finally:
        worker.close()
