"""Complete messages end to end: enqueue, a real worker, the real SMTP test server.

Every wire capture is parsed with ``email.policy.strict`` (a defect is an error),
on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import os
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import strict
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from sqlalchemy import Engine, select

from mailout import Attachment, Mailbox
from mailout.db.schema import attempt_recipients, attempts, messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.support.timetravel import make_due

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")
PDF = b"%PDF-1.7\n" + os.urandom(50_000) + b"\n%%EOF\n"
PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(3_000)


def parsed(data: bytes) -> EmailMessage:
    message = BytesParser(policy=strict).parsebytes(data)
    assert isinstance(message, EmailMessage)
    return message


def row(engine: Engine, rid: int) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages).where(messages.c.id == rid)).one()._mapping)


def test_everything_arrives_as_enqueued(engine: Engine, db_url: str,
                                        smtp_server: SmtpTestServer) -> None:
    with engine.begin() as conn:
        rid = enqueue(
            conn, to=['"Doe, John" <john@example.com>', Mailbox("ana@example.com", "Ana Pérez")],
            cc="Støre <cc@example.com>", bcc=["hidden@example.com", "Quiet <q@example.com>"],
            reply_to="Support <help@shop.example.com>", subject="Your invoice",
            text="See attached.", html='<p>Thanks!</p><img src="cid:logo.png">',
            attachments=[Attachment("factura-€-2024 ñ.pdf", PDF),
                         Attachment("logo.png", PNG, inline=True)],
            unsubscribe=["https://shop.example.com/u?t=abc", "mailto:unsub@shop.example.com"],
            key="invoice-1", settings=SETTINGS).id

    run_until_idle(settings_for(db_url, smtp_server))

    assert row(engine, rid)["status"] == "sent"
    [received] = smtp_server.messages
    # Bcc: in the envelope, in no header.
    assert set(received.rcpt_tos) == {"john@example.com", "ana@example.com", "cc@example.com",
                                      "hidden@example.com", "q@example.com"}
    head = received.data.split(b"\r\n\r\n", 1)[0].lower()
    # No Bcc field (by name: a random Message-ID or boundary may hold the letters "bcc").
    assert not any(line.startswith(b"bcc:") for line in head.split(b"\r\n"))
    assert b"hidden@" not in head
    assert b"q@example.com" not in head
    mail = parsed(received.data)
    assert "Bcc" not in mail
    # Display names round-trip exactly.
    assert [(a.display_name, a.addr_spec) for a in mail["To"].addresses] == [
        ("Doe, John", "john@example.com"), ("Ana Pérez", "ana@example.com")]
    assert [(a.display_name, a.addr_spec) for a in mail["Cc"].addresses] == [
        ("Støre", "cc@example.com")]
    assert [(a.display_name, a.addr_spec) for a in mail["Reply-To"].addresses] == [
        ("Support", "help@shop.example.com")]
    # The attachment decodes byte-exact, under its RFC 2231 filename.
    [attached] = list(mail.iter_attachments())
    assert attached.get_filename() == "factura-€-2024 ñ.pdf"
    assert attached.get_content_type() == "application/pdf"
    assert attached.get_content() == PDF
    assert b"filename*=utf-8''factura-%E2%82%AC-2024%20%C3%B1.pdf" in received.data
    # The cid reference resolves to the inline part, next to the HTML.
    related = next(p for p in mail.walk() if p.get_content_type() == "multipart/related")
    html = next(p for p in related.walk() if p.get_content_type() == "text/html")
    logo = next(p for p in related.iter_parts() if p["Content-ID"] == "<logo.png>")
    assert "cid:logo.png" in html.get_content()
    assert logo.get_content() == PNG
    assert logo.get_content_disposition() == "inline"
    # Unsubscribe: both URIs, and one-click because one is https.
    assert mail["List-Unsubscribe"] == ("<https://shop.example.com/u?t=abc>, "
                                        "<mailto:unsub@shop.example.com>")
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


def test_partial_acceptance_retries_the_deferred_recipient_alone(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    ok, gone = "ok@example.com", "gone.rcpt-550@example.com"
    busy = "busy.rcpt-451-once@example.com"
    with engine.begin() as conn:
        rid = enqueue(conn, to=[ok, gone], cc=busy, subject="Hi", text="x", key="p-1",
                      settings=SETTINGS).id
    # A backoff of an hour: the first run ends before the retry is due, however slowly
    # it runs; then the backoff is made to pass (timetravel).
    settings = settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=3600,
                            MAILOUT_RETRY_CAP_SECONDS=3600)
    run_until_idle(settings)

    first = row(engine, rid)
    assert (first["status"], first["reason"]) == ("pending", "recipients_deferred")
    assert first["settled"] == {ok: "sent", gone: "failed"}
    assert make_due(engine, [rid]) == 1
    run_until_idle(settings)

    final = row(engine, rid)
    assert (final["status"], final["reason"]) == ("sent", "partially_refused")
    assert final["settled"] == {ok: "sent", gone: "failed", busy: "sent"}
    # The accepted recipient got exactly one copy; the 451 one got the retry alone.
    assert [m.rcpt_tos for m in smtp_server.messages] == [(ok,), (busy,)]
    assert smtp_server.messages[0].message_id == smtp_server.messages[1].message_id
    with engine.connect() as conn:
        log = conn.execute(select(attempt_recipients.c.attempt, attempt_recipients.c.address,
                                  attempt_recipients.c.outcome, attempt_recipients.c.reply_code,
                                  attempt_recipients.c.enhanced_code)
                           .where(attempt_recipients.c.outbox_id == rid)
                           .order_by(attempt_recipients.c.id)).all()
        tries = conn.execute(select(attempts.c.attempt, attempts.c.outcome)
                             .where(attempts.c.outbox_id == rid).order_by(attempts.c.id)).all()
    assert [tuple(r) for r in log] == [
        (1, ok, "sent", 250, "2.1.5"), (1, gone, "failed", 550, "5.1.1"),
        (1, busy, "retry", 451, "4.3.0"), (2, busy, "sent", 250, "2.0.0")]
    assert [tuple(t) for t in tries] == [(1, "partial"), (2, "sent")]


def test_a_deferred_recipient_that_never_gets_through_leaves_the_row_sent(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    ok, busy = "ok@example.com", "busy.rcpt-451@example.com"
    with engine.begin() as conn:
        rid = enqueue(conn, to=[ok, busy], subject="Hi", text="x", key="p-2",
                      settings=SETTINGS).id
    settings = settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=0.05,
                            MAILOUT_RETRY_CAP_SECONDS=0.1, MAILOUT_MAX_ATTEMPTS=2)
    for _ in range(3):
        run_until_idle(settings)
        make_due(engine, [rid])  # the retry's backoff has passed
    final = row(engine, rid)
    assert (final["status"], final["reason"]) == ("sent", "partially_refused")
    assert final["settled"] == {ok: "sent", busy: "dead"}
    assert [m.rcpt_tos for m in smtp_server.messages] == [(ok,)]


def test_every_recipient_refused_fails(engine: Engine, db_url: str,
                                      smtp_server: SmtpTestServer) -> None:
    with engine.begin() as conn:
        rid = enqueue(conn, to="a.rcpt-550@example.com", bcc="b.rcpt-550@example.com",
                      subject="Hi", text="x", key="p-3", settings=SETTINGS).id
    run_until_idle(settings_for(db_url, smtp_server))
    final = row(engine, rid)
    assert (final["status"], final["reason"]) == ("failed", "recipient_rejected")
    assert smtp_server.messages == []


@pytest.mark.parametrize(("locale", "expected"), [
    ("es-MX", "Hola desde México"), ("es-AR", "Hola"), ("es", "Hola"), ("de", "Hello"),
    (None, "Hello")])
def test_locale_picks_the_most_specific_variant(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path,
    locale: str | None, expected: str
) -> None:
    base = tmp_path / "welcome"
    for folder, subject in ((base, "Hello"), (base / "es", "Hola"),
                            (base / "es-MX", "Hola desde México")):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "subject.txt").write_text(subject + " {{ name }}", encoding="utf-8")
        (folder / "text.txt").write_text(subject, encoding="utf-8")
    cfg = EnqueueSettings(templates_dir=tmp_path, message_id_domain="test.example.com")
    with engine.begin() as conn:
        rid = enqueue(conn, to="a@example.com", template="welcome", params={"name": "Ana"},
                      locale=locale, settings=cfg).id
    assert row(engine, rid)["locale"] == locale
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=tmp_path))
    [received] = smtp_server.messages
    assert parsed(received.data)["Subject"] == f"{expected} Ana"


def test_suppressed_recipients_of_a_message_to_several_are_left_out(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    from mailout.db import suppressions

    with engine.begin() as conn:
        suppressions.suppress(conn, "gone@example.com", "hard_bounce", actor="test")
        some = enqueue(conn, to="ok@example.com", cc="Gone@Example.com", subject="Hi",
                       text="x", key="s-1", settings=SETTINGS).id
        everyone = enqueue(conn, to="gone@example.com", bcc="gone@example.com",
                           subject="Hi", text="x", key="s-2", settings=SETTINGS).id
    run_until_idle(settings_for(db_url, smtp_server))

    kept = row(engine, some)
    assert (kept["status"], kept["reason"]) == ("sent", "partially_refused")
    assert kept["settled"] == {"ok@example.com": "sent", "Gone@example.com": "suppressed"}
    assert (row(engine, everyone)["status"], row(engine, everyone)["reason"]) == (
        "cancelled", "suppressed")
    [received] = smtp_server.messages
    assert received.rcpt_tos == ("ok@example.com",)
    assert b"Cc: Gone@example.com" in received.data  # the headers still name everyone


def test_recipient_limit_and_conflicting_arguments_write_nothing(engine: Engine) -> None:
    from mailout import InvalidMessage

    few = EnqueueSettings(message_id_domain="test.example.com", max_recipients=3)
    with engine.begin() as conn:
        with pytest.raises(InvalidMessage) as many:
            enqueue(conn, to=["a@example.com", "b@example.com"], cc="c@example.com",
                    bcc="d@example.com", subject="x", text="x", settings=few)
        with pytest.raises(InvalidMessage) as twice:
            enqueue(conn, to="a@example.com", reply_to="r@example.com",
                    headers={"Reply-To": "s@example.com"}, subject="x", text="x",
                    settings=few)
        # The same address in to and bcc counts once.
        ok = enqueue(conn, to=["a@example.com", "b@example.com"], cc="c@example.com",
                     bcc="a@Example.com", subject="x", text="x", settings=few).id
    assert many.value.field == "to"
    assert "4 recipients" in many.value.reason
    assert "MAILOUT_MAX_RECIPIENTS" in many.value.reason
    assert twice.value.field == "reply_to"
    stored = row(engine, ok)
    assert stored["recipient"] == "a@example.com"
    assert stored["addresses"] == {"to": [["", "a@example.com"], ["", "b@example.com"]],
                                   "cc": [["", "c@example.com"]], "bcc": [["", "a@example.com"]]}
    with engine.connect() as conn:
        assert conn.execute(select(messages.c.id)).scalars().all() == [ok]
