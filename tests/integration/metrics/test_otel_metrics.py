"""OpenTelemetry metrics: with a meter provider configured, one worker run reports the
same figures through OpenTelemetry as through Prometheus (real SMTP, each database)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import settings_for
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, update

from mailout.db.schema import messages
from mailout.metrics.observer import Observers
from mailout.metrics.otel import OtelObserver
from mailout.metrics.prometheus import PrometheusObserver
from mailout.worker.build import build_worker
from tests.integration.metrics.test_observability import add
from tests.support.otel_metrics import InMemoryMetricReader, metric_reader, points
from tests.support.timetravel import make_due

__all__ = ["metric_reader"]  # the fixture, imported for the tests below

Labels = frozenset[tuple[str, str]]


def _prometheus(registry: CollectorRegistry, name: str) -> dict[Labels, float]:
    return {frozenset(s.labels.items()): s.value for family in registry.collect()
            for s in family.samples if s.name == name}


def _renamed(found: dict[Labels, float], **names: str) -> dict[Labels, float]:
    """Prometheus labels under their OpenTelemetry attribute names (``le`` dropped)."""
    return {frozenset((names[k], v) for k, v in labels if k in names): value
            for labels, value in found.items()}


def _otel(found: dict[tuple[str, Any], Any], name: str, field: str = "value",
          ) -> dict[Labels, float]:
    return {frozenset((k, v) for k, v in attributes
                      if not k.startswith("messaging.") or k == "messaging.destination.name"):
            getattr(point, field) for (metric, attributes), point in found.items()
            if metric == name}


def test_otel_metrics_equal_the_prometheus_ones_in_one_run(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer,
    metric_reader: InMemoryMetricReader,
) -> None:
    add(engine, ["ana@example.com", "bo@example.com", "rcpt-451-once@example.com",
                 "rcpt-550@example.com"], prefix="m")
    add(engine, ["later@example.com"], prefix="later",
        send_at=datetime.now(UTC) + timedelta(hours=1))
    # A row abandoned by a dead worker: its lease ran out, it will be reclaimed.
    (orphan,) = add(engine, ["orphan@example.com"], prefix="orphan")
    with engine.begin() as conn:
        conn.execute(update(messages).where(messages.c.id == orphan).values(
            status="sending", attempts=1, lease_owner="gone:1:x", lease_token="stale",
            lease_expires_at=datetime.now(UTC) - timedelta(minutes=1),
            last_attempt_at=datetime.now(UTC) - timedelta(minutes=3),
            created_at=datetime.now(UTC) - timedelta(minutes=5)))
    prometheus = PrometheusObserver(cache_seconds=0)
    worker = build_worker(settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=600),
                          until_idle=True, observer=prometheus)
    try:
        assert isinstance(worker.observer, Observers)
        (otel,) = [o for o in worker.observer.members if isinstance(o, OtelObserver)]
        prometheus.bind(worker)
        asyncio.run(worker.run())
        make_due(engine)  # the retry and the scheduled row wait: a due backlog to show
        registry = prometheus.registry
        got = points(metric_reader)
        sends = _prometheus(registry, "mailout_sends_total")
        assert sends[frozenset({("queue", "default"), ("outcome", "sent")})] == 3
        assert sends[frozenset({("queue", "default"), ("outcome", "retry")})] == 1
        assert sends[frozenset({("queue", "default"), ("outcome", "failed")})] == 1
        queue, outcome = "messaging.destination.name", "mailout.outcome"
        assert _otel(got, "mailout.sends") == _renamed(sends, queue=queue, outcome=outcome)
        assert _otel(got, "mailout.transport.sends") == _renamed(
            _prometheus(registry, "mailout_transport_sends_total"),
            transport="mailout.transport", outcome=outcome)
        assert _otel(got, "mailout.lease.reclaims") == _renamed(
            _prometheus(registry, "mailout_lease_reclaims_total"), queue=queue) == {
            frozenset({(queue, "default")}): 1}
        for otel_name, prom_name in (("messaging.process.duration",
                                      "mailout_attempt_duration_seconds"),
                                     ("mailout.delivery.latency",
                                      "mailout_delivery_latency_seconds")):
            for field in ("count", "sum"):
                assert _otel(got, otel_name, field) == _renamed(
                    _prometheus(registry, f"{prom_name}_{field}"), queue=queue)
        (duration,) = [p for (name, _), p in got.items() if name == "messaging.process.duration"]
        assert duration.count == 5
        assert dict(duration.attributes)["messaging.operation.name"] == "send"
        depth = _prometheus(registry, "mailout_queue_messages")
        assert depth[frozenset({("queue", "default"), ("status", "pending")})] == 2
        assert _otel(got, "mailout.queue.messages") == _renamed(
            depth, queue=queue, status="mailout.queue.status")
        assert _otel(got, "mailout.queue.due_messages") == _renamed(
            _prometheus(registry, "mailout_queue_due_messages"), queue=queue) == {
            frozenset({(queue, "default")}): 2}
        # Two readings of the database clock a moment apart: equal within that moment.
        (age,) = _otel(got, "mailout.queue.oldest_due_age").values()
        (prom_age,) = _prometheus(registry, "mailout_queue_oldest_due_age_seconds").values()
        assert age > 0
        assert abs(age - prom_age) < 0.5
    finally:
        worker.alerts.close()
        worker.engine.dispose()
    assert otel.queues.queries >= 1
