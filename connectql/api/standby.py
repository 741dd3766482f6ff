"""`connectql server --standby`: wait beside the active worker of a shared home, answering
/health with the role and the active worker's address, and take the lease over when it lapses;
the SparkSession is started while waiting, so that the takeover does not wait for the JVM."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import uvicorn

from connectql.worker.home import is_live, read_lease
from connectql.worker.lease import wait_for_lapse


def _app(home: Path):
    """The standby's whole API: /health, and 503 naming the active worker for anything else."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        lease = read_lease(home)
        active = lease.get("url") if is_live(lease) else None
        if scope["path"].rstrip("/") == "/health":
            status, body = (
                200,
                {"status": "ok", "role": "standby", "active": active, "home": str(home)},
            )
        else:
            message = f"this is a standby worker of {home}; the active worker is at {active}"
            status, body = 503, {"error_code": 503, "message": message}
        data = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


def stand_by(
    home: Path, host: str, port: int, token: str | None, tls, say
) -> tuple[int, int] | None:
    """Serve the standby's /health on host:port until the home's lease lapses; then take the
    next epoch. Returns (epoch, the port served), or None when interrupted first."""
    from connectql.api.guard import Guard
    from connectql.api.transport import Protocol, listen
    from connectql.runtime import session
    from connectql.runtime.session import logging_settings

    lease = read_lease(home) or {}
    session.start_early({**logging_settings(home), **lease.get("spark", {})})
    sock = listen(host, port)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        Guard(_app(home), token),
        http=Protocol,
        lifespan="off",
        log_config=None,
        access_log=False,
        ssl_certfile=tls.cert if tls else None,
        ssl_keyfile=tls.key if tls else None,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])),
        name="connectql-standby",
        daemon=True,
    )
    thread.start()
    scheme = "https" if tls else "http"
    say(f"connectql standby on {scheme}://{host}:{port} (home {home}); active: {lease.get('url')}")
    stopping = threading.Event()
    try:
        epoch = wait_for_lapse(home, stopping)
    finally:
        stopping.set()
        server.should_exit = True
        thread.join(10)
        sock.close()
    return None if epoch is None else (epoch, port)
