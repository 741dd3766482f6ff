"""Core NATS (mode = 'core'): a subject without JetStream, which the server delivers only to the
subscribers connected when a message is published and keeps nothing of, so nothing can be read
again. The source subscribes in a thread of the driver and hands each message to the toolkit's
Spooler, which appends it to the spool under the checkpoint (core NATS has no acknowledgement,
and resends nothing); the offsets are spool positions, so a replayed batch reads the same
messages from the spool. What is published while no subscription is there (the connector paused,
stopped, restarting or killed) is lost, and so is what was received but not yet spooled at a
kill -9: at-most-once. The sink publishes plain messages and flushes them to the server before
the batch commits; the server hands them to the subscribers connected then: at-most-once too."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from connectql.connectors.nats.client import CONNECT_S, held, where
from connectql.toolkit import Retryable
from connectql.toolkit.spool import Spooled, Spooler

LOOK_S = 0.1  # how often the subscription looks whether it is to stop or its connection is lost
STOP_S = 10.0


class Subscription:
    """A connection in a thread of its own subscribed to `subject`, each message put in the
    spooler; a lost connection fails the spooler naming the server (the connector restarts)."""

    def __init__(self, options: dict[str, Any], subject: str, spooler: Spooler):
        self.options, self.subject, self.spooler = options, subject, spooler
        self.ready, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="nats-core", daemon=True)

    def start(self) -> None:
        """Subscribed when this returns (what is published from now on is received), or the
        spooler holds why not."""
        self._thread.start()
        if not self.ready.wait(CONNECT_S * 2):
            self.spooler.fail(
                Retryable(f"nats source: {where(self.options)} did not take the subscription")
            )

    def stop(self) -> None:
        """Unsubscribe, the messages the server had sent handed to the spooler first."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_S)

    def _run(self) -> None:
        try:
            held(self.options, "nats source", self._subscribed)
        except Exception as e:  # noqa: BLE001 (raised by the source's next look)
            self.spooler.fail(e)
        finally:
            self.ready.set()

    async def _subscribed(self, nc) -> None:
        async def received(msg) -> None:
            self.spooler.put(msg)

        sub = await nc.subscribe(self.subject, cb=received)
        await nc.flush(CONNECT_S)  # the server has the subscription
        self.ready.set()
        while not self._stop.is_set():
            if nc.is_closed:
                raise Retryable(f"nats source: lost {where(self.options)}")
            await asyncio.sleep(LOOK_S)
        await sub.drain()


def spooled(msg, now_us: int) -> Spooled:
    """A received message as the spool keeps it: no key, its headers, the time it came."""
    return Spooled(msg.subject, msg.data, None, dict(msg.headers) if msg.headers else None, now_us)
