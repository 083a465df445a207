"""Issue 36's acceptance: ONE trace view holds the checkout request, its ``create`` span,
both ``send`` attempts (a 4yz retry, then sent) and the ``ingest`` of the bounce, joined
by links. The SDK's in-memory exporter, a real SMTP server, a real DSN through the
return path, on each database."""

from __future__ import annotations

from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from sqlalchemy import Engine

from mailout.feedback import dsn
from mailout.feedback.ingest import Policy, ingest
from mailout.message.return_path import ReturnPath
from mailout.outbox import EnqueueSettings, enqueue
from tests.integration.feedback.test_forged_reports import dsn_report
from tests.support.timetravel import make_due
from tests.support.tracing import InMemorySpanExporter, spans, trace, trace_view

__all__ = ["spans"]  # the fixture, imported for the test below

SECRET = "checkout-return-path-secret"
RETURN_PATH = "bounces+{id}@shop.example"


def test_one_trace_view_holds_the_checkout_its_create_both_sends_and_the_bounce(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, spans: InMemorySpanExporter
) -> None:
    shop = trace.get_tracer("shop")
    with shop.start_as_current_span("POST /checkout", kind=trace.SpanKind.SERVER) as checkout, \
            engine.begin() as conn:
        row = enqueue(conn, to="rcpt-451-once@example.com", subject="Order 1234",
                      text="Thanks", key="order-1234-confirmation",
                      settings=EnqueueSettings(message_id_domain="shop.example"))
    settings = settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=600,
                            MAILOUT_RETURN_PATH=RETURN_PATH,
                            MAILOUT_RETURN_PATH_SECRET=SECRET)
    run_until_idle(settings)  # 451: a retry, due in ten minutes
    make_due(engine, [row.id])
    run_until_idle(settings)
    (received,) = smtp_server.messages
    # The recipient's server bounces it later, to the signed return path it was sent from.
    report = dsn_report(received.mail_from, "rcpt-451-once@example.com", row.message_id)
    with engine.begin() as conn:
        assert ingest(conn, dsn.parse(report),
                      Policy(return_path=ReturnPath(RETURN_PATH, SECRET))).matched == 1

    view = trace_view(spans.get_finished_spans(), checkout.get_span_context().trace_id)
    assert sorted(s.name for s in view) == [
        "POST /checkout", "create default", "ingest bounced", "send default", "send default"]
    by_name = {s.name: s for s in view}
    create = by_name["create default"]
    assert create.parent is not None
    assert create.parent.span_id == checkout.get_span_context().span_id
    sends = sorted((s for s in view if s.name == "send default"),
                   key=lambda s: s.attributes["mailout.attempt"] if s.attributes else 0)
    assert [(s.attributes or {}).get("mailout.outcome") for s in sends] == ["retry", "sent"]
    assert [(s.attributes or {}).get("mailout.reply_code") for s in sends] == [451, 250]
    # Each attempt and the bounce: a trace of its own, linked to the create span.
    for span in (*sends, by_name["ingest bounced"]):
        assert span.context.trace_id != create.context.trace_id
        assert [(lk.context.trace_id, lk.context.span_id) for lk in span.links] == [
            (create.context.trace_id, create.context.span_id)]
    assert (by_name["ingest bounced"].attributes or {})["mailout.outbox_id"] == row.id
