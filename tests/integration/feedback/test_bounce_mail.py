"""Bounce mail as real MTAs write it, ingested on a real database: plain-text bounces
link and act like DSNs, and one hostile report does not stop the batch."""

from __future__ import annotations

from sqlalchemy import Engine, select

from mailout.db.schema import events, suppressions
from mailout.feedback import dsn
from mailout.feedback.ingest import Policy, ingest
from tests.integration.webhooks.test_handler import sent_row
from tests.unit.feedback.test_real_mta_reports import PER_RECIPIENT, QMAIL, report


def test_a_plain_text_bounce_of_our_message_links_and_suppresses(engine: Engine) -> None:
    rid, _pid, message_id = sent_row(engine, "dana@customer.example")
    raw = QMAIL.format(reply="Sorry, no mailbox here by that name. (#5.1.1)").replace(
        "<c0ffee00c0ffee00c0ffee00c0ffee99@shop.example>", message_id)
    with engine.begin() as conn:
        result = ingest(conn, dsn.parse(raw.encode()), Policy())
    assert (result.matched, result.suppressed) == (1, ("dana@customer.example",))
    with engine.connect() as conn:
        assert conn.execute(select(events.c.outbox_id, events.c.reason)).one() == (
            rid, "mailbox_unknown")


def test_nuls_and_bad_bytes_in_one_report_do_not_stop_the_batch(engine: Engine) -> None:
    _rid, _pid, message_id = sent_row(engine, "dana@customer.example")
    hostile = report(PER_RECIPIENT.replace("rfc822; dana@customer.example",
                                           "rfc822; da\x00na@customer.example")
                     ).replace(b"user unknown", b"user \x00unknown \xff\xfe")
    good = report(PER_RECIPIENT).replace(
        b"<c0ffee00c0ffee00c0ffee00c0ffee99@shop.example>", message_id.encode())
    batch = dsn.parse(hostile) + dsn.parse(good)
    with engine.begin() as conn:  # PostgreSQL refused the whole batch over the NUL
        result = ingest(conn, batch, Policy())
    assert (result.stored, result.suppressed) == (2, ("dana@customer.example",))
    with engine.connect() as conn:
        assert set(conn.scalars(select(suppressions.c.address))) == {"dana@customer.example"}
