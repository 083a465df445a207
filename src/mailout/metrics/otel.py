"""The worker's metrics through OpenTelemetry, when the application configured a meter
provider (the ``mailout[otel]`` extra).

The same figures :class:`mailout.metrics.prometheus.PrometheusObserver` gives, under
OpenTelemetry's names and attributes (the messaging conventions where they have one):

==============================  ======================================  ===================
Prometheus                      OpenTelemetry                           attributes
==============================  ======================================  ===================
mailout_sends_total             mailout.sends                           queue, outcome
mailout_transport_sends_total   mailout.transport.sends                 transport, outcome
mailout_attempt_duration_...    messaging.process.duration (s)          queue, operation
mailout_delivery_latency_...    mailout.delivery.latency (s)            queue
mailout_lease_reclaims_total    mailout.lease.reclaims                  queue
mailout_queue_messages          mailout.queue.messages                  queue, status
mailout_queue_due_messages      mailout.queue.due_messages              queue
mailout_queue_oldest_due_...    mailout.queue.oldest_due_age (s)        queue
==============================  ======================================  ===================

The queue is ``messaging.destination.name``, the outcome ``mailout.outcome``, the
transport ``mailout.transport``, the status ``mailout.queue.status``. mailout never
configures the SDK: it uses the global meter provider, and only when one other than the
API's default (which records nothing) is set before the worker is built. Prometheus is
unchanged; both can run at once (:class:`mailout.metrics.observer.Observers`).

May import: ``mailout.metrics``, ``mailout.db``, ``mailout.models``; ``opentelemetry-api``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine

from mailout import __version__
from mailout.metrics.collectors import CACHE_SECONDS, LIVE_STATUSES, QueueCollector
from mailout.metrics.observer import NullObserver
from mailout.metrics.prometheus import ATTEMPT_BUCKETS, LATENCY_BUCKETS
from mailout.models import ClaimedMessage, Completion, Outcome
from mailout.support import _otel_compat

log = logging.getLogger(__name__)

QUEUE = "messaging.destination.name"
OUTCOME = "mailout.outcome"
TRANSPORT = "mailout.transport"
STATUS = "mailout.queue.status"
# messaging.process.duration's own attributes (OpenTelemetry messaging conventions).
_PROCESS = {"messaging.system": "mailout", "messaging.operation.name": "send",
            "messaging.operation.type": "process"}


def meter() -> Any | None:
    """mailout's meter from the global provider; None without the API, while the
    provider is the API's default (no SDK: it would record nothing), or when
    ``OTEL_METRICS_EXPORTER=none`` says no metric is to leave the process."""
    try:
        from opentelemetry import metrics
    except ImportError:
        return None
    # The launcher sets a provider without readers under OTEL_METRICS_EXPORTER=none:
    # recording into it would cost every attempt for nothing (docs/capacity.md).
    if os.environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "none":
        return None
    provider = metrics.get_meter_provider()
    # The API's placeholder before any provider is set has no public name (the fence
    # knows it); a NoOp provider is one an application set on purpose.
    if isinstance(provider, metrics.NoOpMeterProvider) or \
            _otel_compat.is_placeholder_meter_provider(provider):
        return None
    return provider.get_meter("mailout", __version__)


class OtelObserver(NullObserver):
    """Reports attempts, reclaims and the queues to an OpenTelemetry meter. Health
    (ticks, the database, pauses) stays with Prometheus's endpoints."""

    def __init__(self, meter: Any, engine: Engine, queues: Iterable[str], *,
                 cache_seconds: float = CACHE_SECONDS) -> None:
        queues = list(queues)
        self.sends = meter.create_counter(
            "mailout.sends", unit="{attempt}", description="Send attempts by outcome.")
        self.transport_sends = meter.create_counter(
            "mailout.transport.sends", unit="{attempt}",
            description="Send attempts by the transport (or failover member) they went "
                        "through, and outcome.")
        self.duration = meter.create_histogram(
            "messaging.process.duration", unit="s",
            description="Claim to outcome of one send attempt.",
            explicit_bucket_boundaries_advisory=list(ATTEMPT_BUCKETS))
        self.latency = meter.create_histogram(
            "mailout.delivery.latency", unit="s",
            description="Enqueue to acceptance by the server (sent messages only).",
            explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS))
        self.reclaims = meter.create_counter(
            "mailout.lease.reclaims", unit="{message}",
            description="Rows claimed after another worker's lease ran out.")
        # Read from the database when the SDK's reader collects, like a scrape.
        self.queues = QueueCollector(engine, queues, cache_seconds)
        meter.create_observable_gauge(
            "mailout.queue.messages", [self._depth], unit="{message}",
            description="Live messages by queue and status (pending, sending).")
        meter.create_observable_gauge(
            "mailout.queue.due_messages", [self._due], unit="{message}",
            description="Pending messages whose next attempt time has come.")
        meter.create_observable_gauge(
            "mailout.queue.oldest_due_age", [self._age], unit="s",
            description="How long the oldest due pending message has waited past its "
                        "next attempt time (0 if none is due).")
        self._observation = _observation_type()
        self._failed_once = False
        # Series from the start at 0, as PrometheusObserver has them.
        for queue in sorted(set(queues)):
            for outcome in Outcome:
                self.sends.add(0, {QUEUE: queue, OUTCOME: outcome.value})
            self.reclaims.add(0, {QUEUE: queue})

    def attempt(self, msg: ClaimedMessage, completion: Completion, seconds: float) -> None:
        if not completion.logged:
            return  # nothing was attempted, as in PrometheusObserver
        try:
            outcome = completion.outcome.value
            self.sends.add(1, {QUEUE: msg.queue, OUTCOME: outcome})
            if completion.transport is not None:
                self.transport_sends.add(1, {TRANSPORT: completion.transport, OUTCOME: outcome})
            self.duration.record(seconds, {**_PROCESS, QUEUE: msg.queue})
            if completion.outcome is Outcome.SENT:
                waited = (msg.claimed_at - msg.created_at).total_seconds() + seconds
                self.latency.record(max(0.0, waited), {QUEUE: msg.queue})
        except Exception:  # a metrics bug must never keep an attempt from being recorded
            if not self._failed_once:
                self._failed_once = True
                log.exception("otel metrics: could not record an attempt",
                              extra={"event": "metrics_record_failed", "outbox_id": msg.id})

    def reclaimed(self, msg: ClaimedMessage) -> None:
        self.reclaims.add(1, {QUEUE: msg.queue})

    def _depth(self, options: Any) -> list[Any]:
        found = self.queues.snapshot()
        if found is None:
            return []
        return [self._observation(found.count(q, s.value), {QUEUE: q, STATUS: s.value})
                for q in found.queues for s in LIVE_STATUSES]

    def _due(self, options: Any) -> list[Any]:
        found = self.queues.snapshot()
        return [] if found is None else [
            self._observation(found.count(q, "due"), {QUEUE: q}) for q in found.queues]

    def _age(self, options: Any) -> list[Any]:
        found = self.queues.snapshot()
        return [] if found is None else [
            self._observation(found.age(q), {QUEUE: q}) for q in found.queues]


def _observation_type() -> Any:
    from opentelemetry.metrics import Observation
    return Observation


def otel_observer(engine: Engine, queues: Iterable[str]) -> OtelObserver | None:
    """An observer reporting to the global meter provider; None when there is none."""
    found = meter()
    return None if found is None else OtelObserver(found, engine, queues)
