"""The worker under the OpenTelemetry distro's launcher, configured only by the standard
OTEL_* variables: ``opentelemetry-instrument mailout worker --until-idle`` sends a message
over real SMTP, and its spans and metrics reach a collector over OTLP/HTTP (the loopback
receiver in tests/support, which decodes the protobuf)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.distro", reason="opentelemetry-distro is not installed "
                    "(pip install -e '.[test]')")

from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import worker_env

from mailout import db
from mailout.outbox import EnqueueSettings, enqueue
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.tracing import InMemorySpanExporter, named, spans, trace

__all__ = ["spans"]  # the fixture: the application side enqueues inside a span

BIN = Path(sys.executable).parent


def test_the_launcher_exports_the_workers_spans_and_metrics_over_otlp_http(
    sqlite_url: str, smtp_server: SmtpTestServer, spans: InMemorySpanExporter
) -> None:
    engine = db.make_engine(sqlite_url)
    with trace.get_tracer("shop").start_as_current_span("POST /checkout"), \
            engine.begin() as conn:
        row = enqueue(conn, to="ana@example.com", subject="Order", text="Thanks",
                      key="order-1", settings=EnqueueSettings(message_id_domain="x.test"))
    engine.dispose()
    (create,) = named(spans.get_finished_spans(), "create")
    with OtlpReceiver() as receiver:
        env = {**os.environ, **worker_env(sqlite_url, smtp_server),
               "OTEL_SERVICE_NAME": "mailer",
               "OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp",
               "OTEL_LOGS_EXPORTER": "none",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base}
        done = subprocess.run([str(BIN / "opentelemetry-instrument"), str(BIN / "mailout"),
                               "worker", "--until-idle"], env=env, capture_output=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        (send,) = [s for s in receiver.wait_for_spans(1) if s.name == "send default"]
        got = receiver.wait_for_metrics("mailout.sends", "messaging.process.duration")
    assert len(smtp_server.messages) == 1
    assert receiver.resources[0]["service.name"] == "mailer"
    assert [(lk.trace_id, lk.span_id) for lk in send.links] == [
        (create.context.trace_id.to_bytes(16, "big"), create.context.span_id.to_bytes(8, "big"))]
    attributes = {a.key: a.value for a in send.attributes}
    assert attributes["messaging.message.id"].string_value == row.message_id
    assert attributes["mailout.outcome"].string_value == "sent"
    sent = [p for p in got["mailout.sends"].sum.data_points
            if {a.key: a.value.string_value for a in p.attributes}.get("mailout.outcome")
            == "sent"]
    assert [p.as_int for p in sent] == [1]
    assert [p.count for p in got["messaging.process.duration"].histogram.data_points] == [1]
