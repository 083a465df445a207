"""Bounce mail as real MTAs write it, ingested on a real database: plain-text bounces
link and act like DSNs, and one hostile report does not stop the batch."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, select

from mailout.db.schema import events, suppressions
from mailout.feedback import dsn
from mailout.feedback.ingest import Policy, ingest
from mailout.message.return_path import ReturnPath
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


def test_provider_bounces_get_their_reason_and_a_sender_side_one_suppresses_nobody(
        engine: Engine) -> None:
    from datetime import UTC, datetime

    from mailout.models import Event, EventType, Provider

    _rid, pid, _mid = sent_row(engine, "dana@customer.example")
    _rid2, pid2, _mid2 = sent_row(engine, "lee@customer.example")
    batch = [
        Event(Provider.POSTMARK, "pm-1", EventType.BOUNCED, "dana@customer.example",
              datetime.now(UTC), subtype="hard", provider_message_id=pid,
              diagnostic="smtp; 550 5.1.1 <dana@customer.example>: user unknown"),
        Event(Provider.POSTMARK, "pm-2", EventType.BOUNCED, "lee@customer.example",
              datetime.now(UTC), subtype="hard", provider_message_id=pid2,
              diagnostic="smtp; 553 5.1.8 <bounces@shop.example>: Sender address rejected: "
                         "Domain not found"),
    ]
    with engine.begin() as conn:
        result = ingest(conn, batch, Policy())
    assert result.suppressed == ("dana@customer.example",)
    assert result.sender_rejected == 1
    with engine.connect() as conn:
        reasons = dict(conn.execute(select(events.c.recipient, events.c.reason)).all())
    assert reasons == {"dana@customer.example": "mailbox_unknown",
                       "lee@customer.example": "sender_rejected"}


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dsn"
VERP = ReturnPath("bounces+{id}@shop.example", "return-path-secret-0123")


def _to_row(name: str, recipient: str, return_path: str) -> bytes:
    """A fixture as if it came back to ``return_path`` from a message to
    ``recipient``."""
    raw = (FIXTURES / name).read_bytes()
    for old in (b"lee@customer.example", b"dana@customer.example"):
        raw = raw.replace(old, recipient.encode())
    return raw.replace(b"bounces@shop.example", return_path.encode())


def test_a_prose_bounce_to_our_signed_return_path_links_and_suppresses(
        engine: Engine) -> None:
    rid, _pid, _mid = sent_row(engine, "lee@mail.example")
    address = VERP.for_row(rid)
    raw = _to_row("prose_failure_reasons.eml", "lee@mail.example", address)
    raw = raw.replace(b"<c0ffee00c0ffee00c0ffee00c0ffee51@shop.example>", b"<other@x.example>")
    with engine.begin() as conn:  # linked by the return path alone: the Message-ID is not ours
        result = ingest(conn, dsn.parse(raw), Policy(return_path=VERP))
    assert (result.matched, result.suppressed) == (1, ("lee@mail.example",))


def test_a_prose_bounce_unsigned_or_unlinked_suppresses_nobody(engine: Engine) -> None:
    rid, _pid, _mid = sent_row(engine, "lee@mail.example")
    unsigned = f"bounces+{rid}@shop.example"
    raw = _to_row("prose_failure_reasons.eml", "lee@mail.example", unsigned)
    with engine.begin() as conn:
        result = ingest(conn, dsn.parse(raw), Policy(return_path=VERP))
    assert (result.matched, result.unverified, result.suppressed) == (0, 1, ())


def test_a_linked_refusal_of_our_mail_from_suppresses_nobody_and_alerts(
        engine: Engine) -> None:
    rid, _pid, _mid = sent_row(engine, "dana@mail.example")
    address = VERP.for_row(rid)
    raw = _to_row("exim_mail_from_refused.eml", "dana@mail.example", address)
    with engine.begin() as conn:
        result = ingest(conn, dsn.parse(raw), Policy(return_path=VERP))
    assert (result.matched, result.sender_rejected, result.suppressed) == (1, 1, ())
    with engine.connect() as conn:
        assert conn.execute(select(events.c.reason)).scalar_one() == "sender_rejected"
