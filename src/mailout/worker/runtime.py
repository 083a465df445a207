"""The worker process: runs its lanes and owns what they share.

Each lane (:mod:`mailout.worker.lane`) claims and sends for its own queues. The worker
holds the shared parts and hands each step to its module: recording
(:mod:`mailout.worker.completions`), the pause and outage breakers
(:mod:`mailout.worker.breaker`), alerts (:mod:`mailout.support.alerts`; a failover
member's in :mod:`mailout.worker.member_alerts`), and NOTIFY
wakeups (:mod:`mailout.db.notifications`, PostgreSQL's LISTEN); it runs the lease
heartbeat and the shutdown itself. The tasks beside the lanes run supervised
(:mod:`mailout.worker.side_tasks`): :data:`SIDE_TASKS` says what a failure of each means.
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
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout.db import leasing, notifications, pooler
from mailout.db.stores import store_for
from mailout.delivery import attempt
from mailout.delivery.policy import Lane
from mailout.exceptions import WorkerFailed
from mailout.metrics.observer import NullObserver, Observer
from mailout.models import Completion, Contact, Outcome, Status
from mailout.support.alerts import Alert, Alerts
from mailout.support.logs import SUMMARY_SECONDS, SendLog
from mailout.worker import member_alerts
from mailout.worker.breaker import Breakers, Trip
from mailout.worker.completions import CompletionWriter
from mailout.worker.lane import DB_RETRY_CAP, LaneDeps, LaneRunner
from mailout.worker.operator_pauses import PauseCache
from mailout.worker.options import Options
from mailout.worker.ratelimit import TokenBucket
from mailout.worker.side_tasks import Restart, SideTask, SideTasks

log = logging.getLogger(__name__)

# The side tasks (mailout.worker.side_tasks), by name, and what a failure of each means.
COMPLETIONS = "mailout-completions"
HEARTBEAT = "mailout-heartbeat"
OUTAGE_WATCH = "mailout-outage"
SEND_SUMMARY = "mailout-send-summary"
LISTEN = "mailout-listen"
# A finished attempt that leaves its row in one of these did not send it (a retry
# leaves it pending, and is counted nowhere).
_NOT_SENT = frozenset({Status.FAILED, Status.DEAD, Status.CANCELLED, Status.UNKNOWN})
HEARTBEAT_GIVE_UP = 5  # heartbeat failures in a row that stop the worker
LEASE_MARGIN = 0.2  # of a lease: how early in-flight sends end after a fatal failure
SIDE_TASKS = {
    # Restarted: its buffer survives (a batch leaves it only once committed) and the
    # heartbeat keeps the buffered rows' leases. Failing every batch, it stops the
    # worker rather than hold those rows for ever.
    COMPLETIONS: Restart(first=0.5, cap=10.0, healthy_after=30.0, give_up_after=5),
    # HEARTBEAT: Worker._heartbeat_restart. Restarted at once, a round as it starts,
    # the backoff under half its interval, so one failure costs no lease; failing
    # HEARTBEAT_GIVE_UP times in a row (no round in between), it stops the worker,
    # whose sends then end before their leases (Worker._grace).
    # Never fatal: without it claims poll, and the outage alert or summary line is late.
    LISTEN: Restart(first=1.0, cap=30.0, healthy_after=60.0),
    OUTAGE_WATCH: Restart(first=1.0, cap=30.0, healthy_after=60.0),
    SEND_SUMMARY: Restart(first=1.0, cap=30.0, healthy_after=60.0),
}


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Sends due messages until stopped (or, with ``until_idle``, until none is due)."""

    def __init__(
        self,
        engine: Engine,
        lanes: Sequence[tuple[Lane, attempt.Context]],
        options: Options,
        alerts: Alerts,
        rates: Mapping[str, float] | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.engine = engine
        self.observer: Observer = observer or NullObserver()
        self.opts = options
        self.alerts = alerts
        self.breakers = Breakers(options.pause_seconds, options.pause_cap,
                                 options.outage_seconds, options.outage_cap)
        self.writer = CompletionWriter(
            engine, self._written, lambda: any(r.in_flight for r in self.lanes))
        buckets = {q: TokenBucket(rate) for q, rate in (rates or {}).items()}
        self.pauses = PauseCache()
        self.stopping = False
        deps = LaneDeps(
            engine=engine, options=options, observer=self.observer, breakers=self.breakers,
            pauses=self.pauses, writer=self.writer, stopping=lambda: self.stopping,
            record=self.record,
        )
        self.lanes = [LaneRunner(deps, lane, ctx, buckets) for lane, ctx in lanes]
        self.name = lanes[0][1].worker if lanes else worker_name()
        member_alerts.watch((ctx.transport for _, ctx in lanes), alerts, self.observer,
                            self.name)
        self.sent = 0
        # Rows this worker finished without sending them, by final status (failed,
        # dead, unknown...): what `mailout worker --until-idle` reports beside `sent`.
        self.not_sent: Counter[str] = Counter()
        self._held_alerted: set[str] = set()
        self._outage_alerted = False
        # With until_idle: why the worker stopped early (the transport cannot send).
        self.halted: str | None = None
        # Why the worker stopped on its own: a side task that kept failing.
        self.failure: WorkerFailed | None = None
        self._leases_good_at = time.monotonic()  # see _heartbeat and _grace

    @property
    def poll_seconds(self) -> float:
        return self.opts.poll_seconds

    @property
    def db_retry_cap(self) -> float:
        return DB_RETRY_CAP

    @property
    def lane_specs(self) -> list[Lane]:
        return [runner.lane for runner in self.lanes]

    def stop(self) -> None:
        """Stop claiming; in-flight sends finish (up to the grace period)."""
        if not self.stopping:
            log.info("worker %s stopping", self.name,
                     extra={"event": "worker_stopping", "worker": self.name})
        self.stopping = True
        for lane in self.lanes:
            lane.wake.set()

    def _listen_url(self) -> str | None:
        """Where the LISTEN connection goes; None: no LISTEN, the lanes poll."""
        if not (self.opts.listen and store_for(self.engine).listens):
            return None
        url = pooler.listen_url(self.engine.url.render_as_string(hide_password=False))
        if url is None:
            log.info("behind PgBouncer in transaction mode without %s: no LISTEN, polling "
                     "every %.1f s", pooler.LISTEN_SETTING, self.opts.poll_seconds,
                     extra={"event": "listen_off_pooler", "poll_seconds": self.opts.poll_seconds})
        return url

    async def run(self) -> None:
        """Run until stopped. Never raises for a message, a server or a database outage.

        Raises :class:`~mailout.exceptions.WorkerFailed` after stopping when a side
        task failed ``give_up_after`` times in a row (see :data:`SIDE_TASKS`).
        """
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop)
        self._leases_good_at = time.monotonic()
        side = SideTasks(self._side_task_failed)
        writer = side.start(SideTask(COMPLETIONS, self.writer.run, SIDE_TASKS[COMPLETIONS]))
        side.start(SideTask(HEARTBEAT, self._heartbeat, self._heartbeat_restart()))
        side.start(SideTask(OUTAGE_WATCH, self._watch_outage, SIDE_TASKS[OUTAGE_WATCH]))
        side.start(SideTask(SEND_SUMMARY, self._summarize, SIDE_TASKS[SEND_SUMMARY]))
        url = self._listen_url()
        if url is not None:
            side.start(SideTask(LISTEN, functools.partial(notifications.listen, url, self._wake),
                                SIDE_TASKS[LISTEN]))
        lanes = ", ".join(f"{r.lane.name}({'+'.join(r.lane.queues) or '*'}):{r.lane.concurrency}"
                          for r in self.lanes)
        kind = type(loop).__module__.split(".")[0]
        log.info("worker %s started: lanes %s; event loop %s", self.name, lanes, kind,
                 extra={"event": "worker_started", "worker": self.name, "lanes": lanes,
                        "event_loop": kind})
        try:
            await asyncio.gather(*(lane.run() for lane in self.lanes))
            grace = self._grace()
            await asyncio.gather(*(lane.drain(grace) for lane in self.lanes))
        finally:
            # The writer ends once its buffer is written (or has failed for good); the
            # heartbeat keeps the buffered rows' leases until then.
            self.writer.close()
            await writer
            await side.cancel()
            for lane in self.lanes:
                await lane.ctx.transport.close()
            for send_log in self._send_logs():
                send_log.flush()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
        if self.failure is not None:
            raise self.failure

    def _side_task_failed(self, failure: WorkerFailed) -> None:
        if self.failure is None:
            self.failure = failure
        self.stop()

    def _grace(self) -> float:
        """How long in-flight sends may take to finish once the lanes stopped.

        The configured grace, but after a side task failed (the heartbeat, maybe) no
        longer than the leases are known to last, less a fifth of a lease: a send
        still under way then is cancelled while its row is still ours, and left to
        its lease (an unknown outcome), rather than going on after another worker
        may have taken the row over.
        """
        if self.failure is None:
            return self.opts.shutdown_grace
        good_until = self._leases_good_at + self.opts.lease_seconds * (1 - LEASE_MARGIN)
        return max(0.0, min(self.opts.shutdown_grace, good_until - time.monotonic()))

    def _wake(self, queue: str | None) -> None:
        for lane in self.lanes:
            if queue is None or not lane.lane.queues or queue in lane.lane.queues:
                lane.wake.set()

    def record(self, completion: Completion) -> None:
        """Take a finished attempt: adjust the breakers, queue the write."""
        if completion.outcome is Outcome.HELD:
            self._held(completion)
        self._breakers_after(completion)
        self.writer.add(completion)

    def _breakers_after(self, c: Completion) -> None:
        """What one attempt says about the transport, applied to the breakers."""
        breakers = self.breakers
        if c.contact is Contact.NONE:
            breakers.probe_inconclusive(c.id)  # nothing reached the transport
            return
        if c.contact is Contact.ANSWERED:
            self._end_pause()
            self._end_outage()
            return
        reason = c.reason or c.contact.value
        if c.contact is Contact.PAUSE:
            self._end_outage()  # the provider answered, if only to refuse our settings
            trip = breakers.pause.fail(reason, c.id)
            if trip is not None:
                self._paused(c, reason, trip)
        else:
            breakers.pause.probe_inconclusive(c.id)
            trip = breakers.outage.fail(reason, c.id)
            if trip is not None:
                self._outage(c, reason, trip)
        if self.opts.until_idle and not self.stopping:
            # Nothing will be sent until someone acts: say why and stop, do not hang.
            what = "paused" if c.contact is Contact.PAUSE else "in an outage"
            why = f" ({c.detail})" if c.detail else ""
            self.halted = " ".join(f"transport {what}: {reason}{why}".split())
            self.stop()

    def _paused(self, c: Completion, reason: str, trip: Trip) -> None:
        if trip.opened:
            self.observer.paused(reason)
            self.alerts.fire(Alert("paused", f"sending paused: {reason}",
                                   {"reason": reason, "reply_code": c.reply_code,
                                    "worker": self.name}))
        # The detail is mailout check's diagnosis: which setting to look at.
        log.error("transport paused for %.0fs: %s (code %s)%s", trip.seconds, reason,
                  c.reply_code, f": {c.detail}" if c.detail else "",
                  extra={"event": "transport_paused", "seconds": trip.seconds,
                         "reason": reason, "smtp_code": c.reply_code})

    def _outage(self, c: Completion, reason: str, trip: Trip) -> None:
        if trip.opened:
            self.observer.outage(reason)
            log.error("transport outage started: %s at %s%s; messages stay pending, "
                      "uncharged; first probe in %.0fs", reason, c.stage or "-",
                      f" ({c.detail})" if c.detail else "", trip.seconds,
                      extra={"event": "outage_started", "reason": reason, "stage": c.stage,
                             "seconds": trip.seconds})
        else:
            log.warning("transport outage continues: probe failed (%s); next probe in %.0fs",
                        reason, trip.seconds,
                        extra={"event": "outage_continues", "reason": reason,
                               "seconds": trip.seconds})

    def _end_pause(self) -> None:
        if self.breakers.pause.close():
            self.observer.paused(None)
            self.alerts.fire(Alert("resumed", "sending resumed", {"worker": self.name}))
            log.warning("transport resumed", extra={"event": "transport_resumed"})

    def _end_outage(self) -> None:
        outage = self.breakers.outage
        lasted, reason, probes = outage.open_for(), outage.reason, outage.failed_probes
        if not outage.close():
            return
        self.observer.outage(None)
        log.warning("transport outage ended after %.0fs (%s, %d failed probes): sending "
                    "resumed", lasted, reason, probes,
                    extra={"event": "outage_ended", "seconds": lasted, "reason": reason,
                           "failed_probes": probes})
        if self._outage_alerted:
            self._outage_alerted = False
            self.alerts.fire(Alert("outage_ended", f"transport outage ended after {lasted:.0f}s",
                                   {"reason": reason, "seconds": round(lasted),
                                    "worker": self.name}))

    async def _watch_outage(self) -> None:
        """Fire the "outage" alert once an outage has lasted MAILOUT_OUTAGE_ALERT_SECONDS."""
        after = self.opts.outage_alert_seconds
        while True:
            await asyncio.sleep(min(1.0, after / 4))
            outage = self.breakers.outage
            if outage.is_open and not self._outage_alerted and outage.open_for() >= after:
                self._outage_alerted = True
                self.alerts.fire(Alert(
                    "outage", f"transport outage for {outage.open_for():.0f}s: {outage.reason}",
                    {"reason": outage.reason, "seconds": round(outage.open_for()),
                     "failed_probes": outage.failed_probes, "worker": self.name}))

    def _held(self, c: Completion) -> None:
        if c.detail in self._held_alerted:
            return
        self._held_alerted.add(c.detail or "")
        log.error("message %s left pending: %s", c.id, c.detail,
                  extra={"event": "held", "outbox_id": c.id, "reason": c.reason})
        self.alerts.fire(Alert("held", f"messages left pending: {c.detail}",
                               {"id": c.id, "reason": c.reason, "worker": self.name}))

    def _written(self, batch: list[Completion], fenced: set[int]) -> None:
        for lane in self.lanes:
            lane.wake.set()
        for c in batch:
            if c.id in fenced:
                continue
            if c.status is Status.SENT:
                self.sent += 1
            elif c.status in _NOT_SENT:
                self.not_sent[c.status.value] += 1
            if c.outcome is Outcome.DEAD:
                self.alerts.fire(Alert("dead", f"message {c.id} is dead: {c.reason}", {
                    "id": c.id, "attempts": c.attempt, "reason": c.reason,
                    "reply_code": c.reply_code, "reply_text": c.reply_text,
                }))

    def _send_logs(self) -> list[SendLog]:
        """The lanes' send logs, each once (a worker built by build_worker has one)."""
        return list({id(lane.ctx.send_log): lane.ctx.send_log for lane in self.lanes}.values())

    async def _summarize(self) -> None:
        """Write the accepted-sends summary on time even when sends stop coming."""
        while True:
            await asyncio.sleep(SUMMARY_SECONDS / 2)
            for send_log in self._send_logs():
                send_log.tick()

    def _heartbeat_restart(self) -> Restart:
        """The heartbeat's restart policy, scaled to the lease (see SIDE_TASKS)."""
        interval = self.opts.lease_seconds / 3
        return Restart(first=min(0.1, interval), cap=interval / 2, healthy_after=interval,
                       give_up_after=HEARTBEAT_GIVE_UP)

    async def _heartbeat(self) -> None:
        """Keep the leases of in-flight and unrecorded rows alive: a round at once (so
        a restart after a failure costs no lease), then every third of the lease."""
        while True:
            started = time.monotonic()
            held = [(i, f.msg.lease_token) for lane in self.lanes
                    for i, f in lane.in_flight.items()]
            held += self.writer.held_leases()
            try:
                if held:
                    await asyncio.to_thread(self._extend, held)
                # Every lease held at ``started`` now lasts a lease from then, and any
                # claimed since was given a full lease after it.
                self._leases_good_at = started
            except (OperationalError, DBAPIError) as exc:
                log.warning("lease heartbeat failed: %s", type(exc).__name__,
                            extra={"event": "heartbeat_failed", "error": type(exc).__name__})
            await asyncio.sleep(self.opts.lease_seconds / 3)

    def _extend(self, held: list[tuple[int, str]]) -> None:
        with self.engine.begin() as conn:
            leasing.extend_leases(conn, held, self.opts.lease_seconds)


def make_rng() -> random.Random:
    return random.Random()  # jitter only: no security property needed
