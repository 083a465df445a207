"""The worker loop: claim, hand each message to an attempt, record, repeat.

Each step lives in its own module; this one only schedules them:
claiming (:mod:`store`), one attempt (:mod:`attempt`), recording
(:mod:`completions`), pausing (:mod:`gate`) and alerting (:mod:`alerts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import signal
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout import attempt, db, store
from mailout.alerts import Alert, Alerts
from mailout.completions import CompletionWriter
from mailout.gate import Gate
from mailout.models import ClaimedMessage, Outcome, Status
from mailout.store import Completion

log = logging.getLogger("mailout.worker")

DB_RETRY_CAP = 30.0


@dataclass(frozen=True, slots=True)
class Options:
    """How one worker runs; see :mod:`mailout.config` for the matching settings."""

    concurrency: int = 10
    lease_seconds: float = 120.0
    poll_seconds: float = 1.0
    pause_seconds: float = 30.0
    pause_cap: float = 600.0
    shutdown_grace: float = 30.0
    queues: Sequence[str] | None = None
    until_idle: bool = False


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class _InFlight:
    msg: ClaimedMessage
    task: asyncio.Task[Completion]


class Worker:
    """Sends due messages until stopped (or, with ``until_idle``, until none is due)."""

    def __init__(self, engine: Engine, ctx: attempt.Context, options: Options, alerts: Alerts):
        self.engine = engine
        self.ctx = ctx
        self.opts = options
        self.alerts = alerts
        self.gate = Gate(options.pause_seconds, options.pause_cap)
        self.writer = CompletionWriter(engine, self._written)
        self._in_flight: dict[int, _InFlight] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self.sent = 0

    def stop(self) -> None:
        """Stop claiming; in-flight sends finish (up to the grace period)."""
        if not self._stopping:
            log.info("worker %s stopping", self.ctx.worker)
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Run until stopped. Never raises for a message, a server or a database outage."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop)
        writer = asyncio.create_task(self.writer.run(), name="mailout-completions")
        heartbeat = asyncio.create_task(self._heartbeat(), name="mailout-heartbeat")
        log.info("worker %s started: concurrency=%d queues=%s", self.ctx.worker,
                 self.opts.concurrency, ",".join(self.opts.queues or ["*"]))
        try:
            await self._loop()
            await self._drain()
        finally:
            heartbeat.cancel()
            self.writer.close()
            await writer
            await self.ctx.transport.close()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)

    async def _loop(self) -> None:
        db_backoff = 0.5
        while not self._stopping:
            # Clear before looking: a send finishing from here on must wake the sleep below.
            self._wake.clear()
            free = self.opts.concurrency - len(self._in_flight)
            want = self.gate.capacity(free, len(self._in_flight))
            claimed: list[ClaimedMessage] = []
            if want > 0:
                try:
                    claimed = await asyncio.to_thread(self._claim, want)
                    db_backoff = 0.5
                except (OperationalError, DBAPIError) as exc:
                    log.warning("claim failed, database unreachable? retrying in %.1fs: %s",
                                db_backoff, type(exc).__name__)
                    await self._sleep(db_backoff)
                    db_backoff = min(db_backoff * 2, DB_RETRY_CAP)
                    continue
            for msg in claimed:
                self._start(msg)
            if claimed and len(claimed) == want:
                continue  # a full batch: more may be due, claim again at once
            if self.opts.until_idle and not claimed and await self._idle():
                return
            await self._sleep(self._wait_time())

    def _wait_time(self) -> float:
        if self.gate.paused and not self._in_flight:
            return max(0.05, min(self.gate.seconds_left(), self.opts.poll_seconds))
        return self.opts.poll_seconds

    async def _idle(self) -> bool:
        """With until_idle: nothing running, nothing unwritten and nothing due now."""
        if self._in_flight or not self.writer.idle or self.gate.paused:
            return False
        try:
            due_in = await asyncio.to_thread(self._due_in)
        except (OperationalError, DBAPIError):
            return False  # cannot tell: keep running, the claim loop retries the database
        return due_in is None or due_in > 0

    def _claim(self, limit: int) -> list[ClaimedMessage]:
        with db.immediate(self.engine) as conn:
            return store.claim(
                conn, owner=self.ctx.worker, limit=limit,
                lease_seconds=self.opts.lease_seconds, queues=self.opts.queues,
            )

    def _due_in(self) -> float | None:
        with self.engine.connect() as conn:
            return store.next_due_in(conn, self.opts.queues)

    def _start(self, msg: ClaimedMessage) -> None:
        if msg.reclaimed:
            log.warning("reclaimed id=%s key=%s after an expired lease; the earlier attempt's "
                        "outcome is unknown", msg.id, msg.key)
        task = asyncio.create_task(
            attempt.run(msg, self.ctx, pause_seconds=self.opts.pause_seconds),
            name=f"mailout-send-{msg.id}",
        )
        self._in_flight[msg.id] = _InFlight(msg, task)
        task.add_done_callback(functools.partial(self._finished, msg))

    def _finished(self, msg: ClaimedMessage, task: asyncio.Task[Completion]) -> None:
        self._in_flight.pop(msg.id, None)
        self._wake.set()
        if task.cancelled():
            return  # shutdown gave up on it; its lease expires and it is reclaimed
        exc = task.exception()
        if exc is not None:
            # A bug, not a delivery problem: leave the row to lease expiry rather than
            # guess. The next claim logs the attempt as unknown and resends it.
            log.error("attempt for id=%s crashed: %r", msg.id, exc)
            return
        completion = task.result()
        self._gate_after(completion)
        self.writer.add(completion)

    def _gate_after(self, c: Completion) -> None:
        if c.outcome is Outcome.PAUSED:
            newly, seconds = self.gate.pause(c.reason or "configuration error")
            if newly:
                self.alerts.fire(Alert("paused", f"sending paused: {c.reason}",
                                       {"reason": c.reason, "reply_code": c.reply_code,
                                        "worker": self.ctx.worker}))
            log.error("transport paused for %.0fs: %s (code %s)", seconds, c.reason,
                      c.reply_code)
        elif self.gate.paused and self.gate.resume():
            self.alerts.fire(Alert("resumed", "sending resumed", {"worker": self.ctx.worker}))
            log.warning("transport resumed")

    def _written(self, batch: list[Completion], fenced: set[int]) -> None:
        self._wake.set()
        for c in batch:
            if c.id in fenced:
                continue
            if c.status is Status.SENT:
                self.sent += 1
            elif c.outcome is Outcome.DEAD:
                self.alerts.fire(Alert("dead", f"message {c.id} is dead: {c.reason}", {
                    "id": c.id, "attempts": c.attempt, "reason": c.reason,
                    "reply_code": c.reply_code, "reply_text": c.reply_text,
                }))

    async def _heartbeat(self) -> None:
        """Keep the leases of in-flight and unrecorded rows alive."""
        while True:
            await asyncio.sleep(self.opts.lease_seconds / 3)
            held = [(i, f.msg.lease_token) for i, f in self._in_flight.items()]
            held += self.writer.held_leases()
            if not held:
                continue
            try:
                await asyncio.to_thread(self._extend, held)
            except (OperationalError, DBAPIError) as exc:
                log.warning("lease heartbeat failed: %s", type(exc).__name__)

    def _extend(self, held: list[tuple[int, str]]) -> None:
        with self.engine.begin() as conn:
            store.extend_leases(conn, held, self.opts.lease_seconds)

    async def _drain(self) -> None:
        """Let in-flight sends finish within the grace period, then record everything."""
        tasks = [f.task for f in self._in_flight.values()]
        if tasks:
            log.info("waiting up to %.0fs for %d in-flight sends", self.opts.shutdown_grace,
                     len(tasks))
            _done, pending = await asyncio.wait(tasks, timeout=self.opts.shutdown_grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        self.writer.close()
        await self.writer.wait_idle()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)


def make_rng() -> random.Random:
    return random.Random()  # jitter only: no security property needed
