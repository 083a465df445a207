"""OpenTelemetry end to end: a request span enqueues in its transaction, a real worker
sends over real SMTP after one 4yz retry, a bounce links back, and every span says
what it should and nothing personal. On SQLite, PostgreSQL and MariaDB (each insert
path)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from sqlalchemy import Engine, select
from sqlalchemy.ext.asyncio import create_async_engine

from mailout import db
from mailout.db.schema import messages
from mailout.exceptions import IdempotencyConflict
from mailout.feedback.ingest import Policy, ingest
from mailout.models import Event, EventType, Provider
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_async, enqueue_many
from mailout.support.logs import configure_logging
from mailout.support.tracing import recipient_hash
from tests.support.timetravel import make_due
from tests.support.tracing import (
    InMemorySpanExporter,
    ReadableSpan,
    every_value,
    named,
    spans,
    trace,
)

__all__ = ["spans"]  # the fixture, imported for the tests below

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")
SUBJECT = "Your reset code 771234"
BODY = "Hello Ana, the code is 771234."
PERSONAL = ("rcpt-451-once", "ana.lopez", "@example.com", SUBJECT, BODY, "771234")


def _stored(engine: Engine) -> dict[str, tuple[str | None, str | None]]:
    with engine.connect() as conn:
        return {r.idempotency_key: (r.traceparent, r.tracestate) for r in conn.execute(
            select(messages.c.idempotency_key, messages.c.traceparent, messages.c.tracestate))}


def _traceparent(span: ReadableSpan) -> str:
    ctx = span.context
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def test_enqueue_under_a_request_span_stores_its_create_span_context(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    app = trace.get_tracer("shop")
    with app.start_as_current_span("POST /checkout") as request, engine.begin() as conn:
        one = enqueue(conn, to="ana.lopez@example.com", subject=SUBJECT, text=BODY,
                      key="order-1-confirmation", queue="critical", settings=SETTINGS)
        many = enqueue_many(conn, [
            Message(to=f"ana.lopez+{i}@example.com", subject=SUBJECT, text=BODY,
                    key=f"order-1-item-{i}")
            for i in range(3)], settings=SETTINGS)
    creates = named(spans.get_finished_spans(), "create")
    assert [s.name for s in creates] == ["create critical", "create default"]
    single, batch = creates
    for span in creates:
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id
        assert span.kind is trace.SpanKind.PRODUCER
        assert span.attributes is not None
        assert span.attributes["messaging.system"] == "mailout"
        assert span.attributes["messaging.operation.type"] == "create"
    assert single.attributes == {
        "messaging.system": "mailout", "messaging.operation.type": "create",
        "messaging.operation.name": "create", "messaging.destination.name": "critical",
        "messaging.message.id": one.message_id, "mailout.key": "order-1-confirmation",
    }
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 3
    stored = _stored(engine)
    assert stored["order-1-confirmation"] == (_traceparent(single), None)
    for result in many:
        assert stored[result.key] == (_traceparent(batch), None)
    assert not any(p in v for v in every_value(creates) for p in PERSONAL)


def test_enqueue_outside_any_span_records_nothing_and_stores_no_context(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    with engine.begin() as conn:
        enqueue(conn, to="ana.lopez@example.com", text=BODY, subject=SUBJECT, key="k1",
                settings=SETTINGS)
    assert spans.get_finished_spans() == ()
    assert _stored(engine) == {"k1": (None, None)}


def test_a_rolled_back_enqueue_ends_its_create_span_with_the_error_type_only(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("shop").start_as_current_span("request"), engine.begin() as conn:
        enqueue(conn, to="ana.lopez@example.com", text=BODY, subject=SUBJECT, key="same",
                settings=SETTINGS)
        with pytest.raises(IdempotencyConflict):  # different content, same key
            enqueue(conn, to="ana.lopez@example.com", text="other", subject=SUBJECT,
                    key="same", settings=SETTINGS)
    failed = named(spans.get_finished_spans(), "create")[-1]
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert [e.attributes for e in failed.events] == [
        {"exception.type": "mailout.exceptions.IdempotencyConflict"}]


def test_enqueue_async_keeps_the_callers_span_as_parent(
    sqlite_url: str, spans: InMemorySpanExporter
) -> None:
    async def main() -> None:
        eng = create_async_engine(sqlite_url.replace("sqlite://", "sqlite+aiosqlite://"))
        with trace.get_tracer("shop").start_as_current_span("request"):
            async with eng.begin() as conn:
                await enqueue_async(conn, to="ana.lopez@example.com", text=BODY,
                                    subject=SUBJECT, key="async-1", settings=SETTINGS)
        await eng.dispose()

    asyncio.run(main())
    (create,) = named(spans.get_finished_spans(), "create")
    (request,) = named(spans.get_finished_spans(), "request")
    assert create.parent is not None
    assert create.parent.span_id == request.context.span_id


def test_each_attempt_and_the_bounce_link_to_the_enqueue_and_record_no_personal_data(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("shop").start_as_current_span("POST /reset"), \
            engine.begin() as conn:
        row = enqueue(conn, to="rcpt-451-once@example.com", subject=SUBJECT, text=BODY,
                      key="reset-1234", settings=SETTINGS)
    # The retry is due only once make_due says so: the second attempt is the second run's.
    settings = settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=600)
    run_until_idle(settings)  # the first attempt without MAILOUT_TRACE_STEPS
    make_due(engine, [row.id])  # the retry's backoff has passed
    run_until_idle(replace(settings, trace_steps=True))
    assert len(smtp_server.messages) == 1

    finished = spans.get_finished_spans()
    (create,) = named(finished, "create")
    first, second = named(finished, "send")
    for attempt, span in enumerate((first, second), start=1):
        assert span.name == "send default"
        assert span.kind is trace.SpanKind.CONSUMER
        # Linked, not a child: its own trace, one link to the create span.
        assert span.parent is None
        assert span.context.trace_id != create.context.trace_id
        assert [(lk.context.trace_id, lk.context.span_id) for lk in span.links] == [
            (create.context.trace_id, create.context.span_id)]
        assert span.attributes is not None
        assert span.attributes["messaging.message.id"] == row.message_id
        assert span.attributes["mailout.key"] == "reset-1234"
        assert span.attributes["mailout.outbox_id"] == row.id
        assert span.attributes["mailout.attempt"] == attempt
        assert span.attributes["mailout.transport"] == "smtp"
        # Render and the transport call are children of their attempt when asked for.
        children = sorted(s.name for s in finished
                          if s.parent is not None and s.parent.span_id == span.context.span_id)
        assert children == ([] if attempt == 1 else ["mailout.render", "mailout.transport"])
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["mailout.outcome"] == "retry"
    assert first.attributes["mailout.reply_code"] == 451
    assert first.attributes["mailout.enhanced_code"] == "4.3.0"
    assert first.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in first.events] == ["mailout.attempt_failed"]
    assert second.attributes["mailout.outcome"] == "sent"
    assert second.attributes["mailout.reply_code"] == 250
    assert second.attributes["mailout.provider_message_id"]
    assert second.status.status_code is trace.StatusCode.UNSET
    assert second.events == ()

    bounce = Event(Provider.RESEND, "ev-1", EventType.BOUNCED, "rcpt-451-once@example.com",
                   datetime.now(UTC), subtype="hard", message_id=row.message_id,
                   diagnostic="5.1.1 <rcpt-451-once@example.com>: user unknown")
    with trace.get_tracer("shop").start_as_current_span("POST /webhooks/resend") as hook, \
            engine.begin() as conn:
        assert ingest(conn, [bounce], Policy()).matched == 1
    finished = spans.get_finished_spans()
    (ingested,) = named(finished, "ingest")
    assert ingested.name == "ingest bounced"
    assert ingested.parent is not None
    assert ingested.parent.span_id == hook.get_span_context().span_id
    assert [(lk.context.trace_id, lk.context.span_id) for lk in ingested.links] == [
        (create.context.trace_id, create.context.span_id)]
    assert ingested.attributes == {
        "messaging.system": "mailout", "messaging.operation.type": "process",
        "messaging.operation.name": "ingest", "mailout.event_type": "bounced",
        "mailout.provider": "resend", "mailout.outbox_id": row.id,
        "mailout.matched_by": "message_id", "mailout.event_subtype": "hard",
        "mailout.reason": "mailbox_unknown",
    }
    values = every_value(finished)
    leaked = [v for v in values for p in PERSONAL if p in v]
    assert leaked == []


def test_the_workers_log_line_for_an_attempt_carries_its_send_spans_ids(
    sqlite_url: str, smtp_server: SmtpTestServer, spans: InMemorySpanExporter
) -> None:
    engine = db.make_engine(sqlite_url)
    with trace.get_tracer("shop").start_as_current_span("request"), engine.begin() as conn:
        enqueue(conn, to="rcpt-451@example.com", subject=SUBJECT, text=BODY, key="k",
                settings=SETTINGS)
    engine.dispose()
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    handler = configure_logging("json", stream=stream)
    try:
        run_until_idle(settings_for(sqlite_url, smtp_server))
    finally:
        root.removeHandler(handler)
        root.handlers[:], root.level = saved[0], saved[1]
    (send,) = named(spans.get_finished_spans(), "send")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    (retry,) = [e for e in lines if e.get("outcome") == "retry"]
    assert retry["trace_id"] == f"{send.context.trace_id:032x}"
    assert retry["span_id"] == f"{send.context.span_id:016x}"
    # Lines logged outside any attempt carry none.
    assert any("trace_id" not in e for e in lines)


def test_hashed_recipients_are_a_keyed_hash_of_each_address_and_off_by_default(
    sqlite_url: str, smtp_server: SmtpTestServer, spans: InMemorySpanExporter
) -> None:
    engine = db.make_engine(sqlite_url)
    with trace.get_tracer("shop").start_as_current_span("request"), engine.begin() as conn:
        enqueue(conn, to=["Ana.Lopez@Example.com", "bo@example.com"], subject=SUBJECT,
                text=BODY, key="k1", settings=SETTINGS)
    run_until_idle(settings_for(sqlite_url, smtp_server))  # the default: off
    with trace.get_tracer("shop").start_as_current_span("request"), engine.begin() as conn:
        enqueue(conn, to=["Ana.Lopez@Example.com", "bo@example.com"], subject=SUBJECT,
                text=BODY, key="k2", settings=SETTINGS)
    engine.dispose()
    secret = "trace-recipients-secret-1"
    run_until_idle(settings_for(sqlite_url, smtp_server, MAILOUT_TRACE_RECIPIENTS="hashed",
                                MAILOUT_TRACE_RECIPIENTS_SECRET=secret))
    off, hashed = named(spans.get_finished_spans(), "send")
    assert off.attributes is not None
    assert hashed.attributes is not None
    assert "mailout.recipient_hashes" not in off.attributes
    expected = [recipient_hash(secret.encode(), a)
                for a in ("ana.lopez@example.com", "bo@example.com")]
    assert list(hashed.attributes["mailout.recipient_hashes"]) == expected
    # Keyed: another secret gives other hashes; never the address itself.
    assert recipient_hash(b"another-secret-1234", "bo@example.com") != expected[1]
    leaked = [v for v in every_value(spans.get_finished_spans())
              for p in ("ana.lopez", "Ana.Lopez", "bo@example.com", secret) if p in v]
    assert leaked == []
