"""One lane's loop: claim from its queues, start attempts, sleep until woken.

A lane owns its concurrency slots and its transport (its SMTP connections); the
process-wide parts (database engine, completion writer, transport breaker, alerts)
belong to the :class:`~mailout.worker.runtime.Worker` that runs the lanes, and reach
a lane as a :class:`LaneDeps`, so the lane never sees the rest of the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout import db
from mailout.db import leasing
from mailout.db.stores import store_for
from mailout.delivery import attempt
from mailout.delivery.policy import Lane
from mailout.metrics.observer import Observer
from mailout.models import ClaimedMessage, Completion
from mailout.worker.breaker import Breakers
from mailout.worker.completions import CompletionWriter
from mailout.worker.operator_pauses import PauseCache
from mailout.worker.options import Options
from mailout.worker.ratelimit import TokenBucket

log = logging.getLogger(__name__)

DB_RETRY_CAP = 30.0


@dataclass(frozen=True)
class LaneDeps:
    """The parts of a worker process a lane uses, and nothing else of it."""

    engine: Engine
    options: Options
    observer: Observer
    breakers: Breakers
    pauses: PauseCache
    writer: CompletionWriter
    stopping: Callable[[], bool]  # True once the worker is shutting down
    record: Callable[[Completion], None]  # hand a finished attempt to the worker


@dataclass
class InFlight:
    msg: ClaimedMessage
    task: asyncio.Task[Completion]
    started: float  # time.monotonic() at start


class LaneRunner:
    """Claims and sends for one lane until the worker stops (or the lane is idle)."""

    def __init__(self, deps: LaneDeps, lane: Lane, ctx: attempt.Context,
                 buckets: Mapping[str, TokenBucket]) -> None:
        self.worker = deps
        self.lane = lane
        self.ctx = ctx
        self.in_flight: dict[int, InFlight] = {}
        self._sending: set[int] = set()  # in flight and handed to the transport
        # An ordered batch's last attempt started here: the next one waits for it.
        self._batch_tails: dict[str, asyncio.Task[Completion]] = {}
        self.wake = asyncio.Event()
        # Queues with a send rate are claimed on their own, so each can be paced. A lane
        # over every queue (no queues named) claims the paced ones apart from the rest.
        every = not lane.queues
        rated = [q for q in (buckets if every else lane.queues) if q in buckets]
        self._groups: list[tuple[tuple[str, ...], TokenBucket | None]] = [
            ((q,), buckets[q]) for q in rated
        ]
        unrated = tuple(q for q in lane.queues if q not in buckets)
        if unrated or every:
            self._groups.insert(0, (unrated, None))
        self._exclude = tuple(rated) if every else ()
        # Claims run one at a time: they keep one connection (no pool checkout and
        # pre-ping per claim). On PostgreSQL a claim is one statement, run without a
        # transaction.
        engine = deps.engine
        self._claims = db.HeldConnection(engine, **db.immediate_options(
            one_statement=store_for(engine).claims_in_one_statement))

    async def run(self) -> None:
        db_backoff = 0.5
        opts = self.worker.options
        while not self.worker.stopping():
            # Clear before looking: a send finishing from here on must wake the sleep.
            self.wake.clear()
            self.worker.observer.tick()
            try:
                claimed, full = await self._claim_all()
                db_backoff = 0.5
                self.worker.observer.database(True)
            except (OperationalError, DBAPIError) as exc:
                self.worker.observer.database(False)
                log.warning("claim failed in lane %s, retrying in %.1fs: %s", self.lane.name,
                            db_backoff, type(exc).__name__,
                            extra={"event": "claim_failed", "lane": self.lane.name,
                                   "seconds": db_backoff, "error": type(exc).__name__})
                await self._sleep(db_backoff)
                db_backoff = min(db_backoff * 2, DB_RETRY_CAP)
                continue
            for msg in claimed:
                self._start(msg)
            if full:
                continue  # a full batch: more may be due, claim again at once
            if opts.until_idle and not claimed and await self.idle():
                break
            await self._sleep(self._wait_time())
        # Only on the way out of the loop: a cancelled run may leave a claim running in
        # its thread on that connection (the process is ending then anyway).
        self._claims.close()

    async def _claim_all(self) -> tuple[list[ClaimedMessage], bool]:
        """Claim for every queue group; ``full`` when some group got all it asked for.

        While a breaker is open only a probe is claimed, once its backoff has passed;
        with it, the rows that have outlived their age limit, which end ``dead``
        without a send (so an outage longer than ``max_age`` dead-letters them then,
        not only after it ends). Rows that a claim begun before the breaker opened
        brings back are not probes: they go back to pending, uncharged, unsent.
        """
        breakers = self.worker.breakers
        probing = breakers.paused and breakers.capacity(1, len(self.in_flight)) > 0
        claimed, full = await self._claim_groups()
        if breakers.paused:
            claimed = await self._keep_probe(claimed)
        if probing:
            free = self.lane.concurrency - len(self.in_flight) - len(claimed)
            if free > 0:
                claimed += await asyncio.to_thread(self._claim, self.lane.queues, (), free,
                                                   True)
        return claimed, full and not breakers.paused

    async def _keep_probe(self, claimed: list[ClaimedMessage]) -> list[ClaimedMessage]:
        """The claimed row that becomes the probe, if one is due; the rest are released."""
        breakers = self.worker.breakers
        keep: list[ClaimedMessage] = []  # one at most: the first takes the probe
        back: list[tuple[int, str]] = []
        for msg in claimed:
            if breakers.probe_started(msg.id):
                keep.append(msg)
            else:
                back.append((msg.id, msg.lease_token))
        if back:
            try:
                await asyncio.to_thread(self._release, back)
            except (OperationalError, DBAPIError) as exc:
                # Their leases expire and they are claimed again: late, never lost.
                log.warning("could not release %d rows claimed as the breaker opened: %s",
                            len(back), type(exc).__name__,
                            extra={"event": "release_failed", "lane": self.lane.name,
                                   "count": len(back), "error": type(exc).__name__})
        return keep

    async def _claim_groups(self) -> tuple[list[ClaimedMessage], bool]:
        claimed: list[ClaimedMessage] = []
        full = False
        for queues, bucket in self._groups:
            free = self.lane.concurrency - len(self.in_flight) - len(claimed)
            want = self.worker.breakers.capacity(free, len(self.in_flight) + len(claimed))
            if bucket is not None:
                want = bucket.take(want)
            if want <= 0:
                continue
            exclude = self._exclude if bucket is None else ()
            got = await asyncio.to_thread(self._claim, queues, exclude, want)
            if bucket is not None:
                bucket.give_back(want - len(got))
            claimed += got
            full = full or len(got) == want
        return claimed, full

    def _claim(self, queues: tuple[str, ...], exclude: tuple[str, ...],
               limit: int, expired_only: bool = False) -> list[ClaimedMessage]:
        def claim(conn: Connection) -> list[ClaimedMessage]:
            paused = self.worker.pauses.current(conn)
            return leasing.claim(conn, owner=self.ctx.worker, limit=limit,
                                 lease_seconds=self.worker.options.lease_seconds, queues=queues,
                                 exclude_queues=(*exclude, *paused.queues),
                                 exclude_templates=paused.templates, expired_only=expired_only,
                                 transport=self.ctx.transport.name)

        # A deadlock (MySQL) rolls the claim back whole: it is run again, not raised.
        return db.immediate_retrying(self._claims, claim)

    def _wait_time(self) -> float:
        poll = self.worker.options.poll_seconds
        breaker = self.worker.breakers
        waits = [poll]
        if breaker.paused and not self.in_flight and breaker.seconds_left() > 0:
            # Wake for the probe; once it is allowed, claims wait for a due row as usual.
            waits.append(max(0.05, breaker.seconds_left()))
        waits += [max(0.01, b.wait_time()) for _, b in self._groups if b is not None]
        return min(waits)

    async def idle(self) -> bool:
        """With until_idle: nothing running here, nothing unwritten, nothing due now."""
        if self.in_flight or not self.worker.writer.idle or self.worker.breakers.paused:
            return False
        try:
            due_in = await asyncio.to_thread(self._due_in)
        except (OperationalError, DBAPIError):
            return False  # cannot tell: keep running, the claim loop retries the database
        return due_in is None or due_in > 0

    def _due_in(self) -> float | None:
        with self.worker.engine.connect() as conn:
            paused = self.worker.pauses.current(conn)
            return leasing.next_due_in(conn, self.lane.queues, paused.queues, paused.templates)

    def _start(self, msg: ClaimedMessage) -> None:
        if msg.reclaimed:
            self.worker.observer.reclaimed(msg)
            log.warning("reclaimed id=%s key=%s after an expired lease; the earlier attempt's "
                        "outcome is unknown", msg.id, msg.key,
                        extra={"event": "reclaimed", "outbox_id": msg.id, "key": msg.key})
        opts = self.worker.options
        run = functools.partial(attempt.run, msg, self.ctx, pause_seconds=opts.pause_seconds,
                                outage_seconds=opts.outage_seconds,
                                on_send=functools.partial(self._sending.add, msg.id))
        before = self._batch_tails.get(msg.batch) if msg.batch else None
        task = asyncio.create_task(run() if before is None else _after(before, run),
                                   name=f"mailout-send-{msg.id}")
        self.in_flight[msg.id] = InFlight(msg, task, time.monotonic())
        task.add_done_callback(functools.partial(self._finished, msg))
        if msg.batch:
            self._batch_tails[msg.batch] = task
            task.add_done_callback(functools.partial(self._batch_done, msg.batch))

    def _batch_done(self, batch: str, task: asyncio.Task[Completion]) -> None:
        if self._batch_tails.get(batch) is task:
            del self._batch_tails[batch]

    def _finished(self, msg: ClaimedMessage, task: asyncio.Task[Completion]) -> None:
        flight = self.in_flight.pop(msg.id, None)
        handed_over = msg.id in self._sending
        self._sending.discard(msg.id)
        self.wake.set()
        if task.cancelled():
            return  # shutdown gave up on it; its lease expires and it is reclaimed
        exc = task.exception()
        if exc is not None:
            # A bug, not a delivery problem. attempt.run already turns every error
            # before the send into a decision; this is the last net, so that no
            # exception leaves a row to wait for its lease to expire.
            log.error("attempt for id=%s crashed: %s", msg.id, type(exc).__name__,
                      extra={"event": "attempt_crashed", "outbox_id": msg.id,
                             "error": type(exc).__name__})
            completion = attempt.crashed(msg, self.ctx, exc, handed_over=handed_over)
        else:
            completion = task.result()
        seconds = time.monotonic() - flight.started if flight else 0.0
        self.worker.observer.attempt(msg, completion, seconds)
        self.worker.record(completion)

    async def drain(self, grace: float) -> None:
        """Let in-flight sends finish within ``grace`` seconds; cancel the rest."""
        tasks = [f.task for f in self.in_flight.values()]
        if not tasks:
            return
        log.info("lane %s: waiting up to %.0fs for %d in-flight sends", self.lane.name,
                 grace, len(tasks), extra={"event": "lane_draining", "lane": self.lane.name,
                                           "seconds": grace, "count": len(tasks)})
        _done, pending = await asyncio.wait(tasks, timeout=grace)
        # Rows whose attempt never reached the transport go back to pending at once,
        # uncharged; those cut off mid-send are left to their lease (outcome unknown).
        unstarted = [(f.msg.id, f.msg.lease_token) for f in self.in_flight.values()
                     if f.task in pending and f.msg.id not in self._sending]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        if unstarted:
            try:
                released = await asyncio.to_thread(self._release, unstarted)
                log.info("lane %s: released %d unstarted rows", self.lane.name, released,
                         extra={"event": "lane_released", "lane": self.lane.name,
                                "count": released})
            except (OperationalError, DBAPIError) as exc:
                log.warning("could not release %d rows, their leases will expire: %s",
                            len(unstarted), type(exc).__name__,
                            extra={"event": "release_failed", "lane": self.lane.name,
                                   "count": len(unstarted), "error": type(exc).__name__})

    def _release(self, leases: list[tuple[int, str]]) -> int:
        with self.worker.engine.begin() as conn:
            return leasing.release(conn, leases)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), seconds)


async def _after(before: asyncio.Task[Completion],
                 run: Callable[[], Awaitable[Completion]]) -> Completion:
    """``run()`` once ``before`` (the previous message of an ordered batch) has
    finished, however it ended."""
    await asyncio.wait([before])
    return await run()
