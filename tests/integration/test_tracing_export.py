"""A real export: the OTLP/HTTP exporter posts a request's enqueue and the worker's send
to a receiver on loopback (tests/support/otlp_receiver.py), which decodes the protobuf."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="opentelemetry-exporter-"
                    "otlp-proto-http is not installed (pip install -e '.[test]')")

from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from mailout import db
from mailout.outbox import EnqueueSettings, enqueue
from tests.support.otel_metrics import install_meter_provider, uninstall_meter_provider
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.tracing import install, trace, uninstall


def test_the_spans_reach_a_collector_over_otlp_http(
    sqlite_url: str, smtp_server: SmtpTestServer
) -> None:
    with OtlpReceiver() as receiver:
        provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=receiver.endpoint, timeout=5)))
        install(provider)
        try:
            engine = db.make_engine(sqlite_url)
            with trace.get_tracer("shop").start_as_current_span("POST /checkout"), \
                    engine.begin() as conn:
                row = enqueue(conn, to="ana@example.com", subject="Order", text="Thanks",
                              key="order-1", settings=EnqueueSettings(message_id_domain="x.test"))
            engine.dispose()
            run_until_idle(settings_for(sqlite_url, smtp_server, MAILOUT_TRACE_STEPS="true"))
            assert provider.force_flush(10_000)
        finally:
            uninstall()
            provider.shutdown()
        got = {s.name: s for s in receiver.wait_for_spans(5)}
    assert sorted(got) == ["POST /checkout", "create default", "mailout.render",
                           "mailout.transport", "send default"]
    assert set(receiver.content_types) == {"application/x-protobuf"}
    assert receiver.resources[0]["service.name"] == "shop"
    create, send = got["create default"], got["send default"]
    assert create.parent_span_id == got["POST /checkout"].span_id
    assert [(lk.trace_id, lk.span_id) for lk in send.links] == [
        (create.trace_id, create.span_id)]
    assert got["mailout.transport"].parent_span_id == send.span_id
    attributes = {a.key: a.value for a in send.attributes}
    assert attributes["messaging.message.id"].string_value == row.message_id
    assert attributes["mailout.outcome"].string_value == "sent"
    assert attributes["mailout.reply_code"].int_value == 250


def _attribute(point: Any, key: str) -> str:
    return next(a.value.string_value for a in point.attributes if a.key == key)


def test_the_workers_metrics_reach_a_collector_over_otlp_http(
    sqlite_url: str, smtp_server: SmtpTestServer
) -> None:
    with OtlpReceiver() as receiver:
        # An interval far beyond the test: the export is the one shutdown() makes.
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=receiver.metrics_endpoint, timeout=5),
            export_interval_millis=3_600_000)
        provider = MeterProvider(metric_readers=[reader],
                                 resource=Resource.create({"service.name": "mailer"}))
        install_meter_provider(provider)
        try:
            engine = db.make_engine(sqlite_url)
            with engine.begin() as conn:
                for i, to in enumerate(("ana@example.com", "rcpt-550@example.com")):
                    enqueue(conn, to=to, subject="Order", text="Thanks", key=f"order-{i}",
                            settings=EnqueueSettings(message_id_domain="x.test"))
            engine.dispose()
            run_until_idle(settings_for(sqlite_url, smtp_server))
        finally:
            uninstall_meter_provider()
            provider.shutdown()
        got = receiver.wait_for_metrics("mailout.sends", "messaging.process.duration",
                                        "mailout.delivery.latency", "mailout.queue.messages")
    sends = {_attribute(p, "mailout.outcome"): p.as_int
             for p in got["mailout.sends"].sum.data_points}
    assert sends["sent"] == sends["failed"] == 1
    assert got["mailout.sends"].sum.is_monotonic
    (duration,) = got["messaging.process.duration"].histogram.data_points
    assert duration.count == 2
    assert got["messaging.process.duration"].unit == "s"
    assert [p.count for p in got["mailout.delivery.latency"].histogram.data_points] == [1]
    depth = {_attribute(p, "mailout.queue.status"): p.as_double or p.as_int
             for p in got["mailout.queue.messages"].gauge.data_points}
    assert depth == {"pending": 0, "sending": 0}
