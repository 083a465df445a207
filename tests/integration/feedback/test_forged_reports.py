"""Reports sent by someone without the return-path secret suppress nobody (issue 32).

Each test mails in the report a hostile sender would write, parses it as
``mailout bounces ingest`` does and ingests it on a real database; a control test
shows the same report from the real path does act.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Engine, select

from mailout.db.schema import events, suppressions
from mailout.feedback import dsn
from mailout.feedback.ingest import Policy, Result, ingest
from mailout.message.return_path import ReturnPath
from tests.integration.webhooks.test_handler import sent_row

SECRET = "return-path-secret-0123"
RETURN_PATH = ReturnPath("bounces+{id}@shop.example", SECRET)
POLICY = Policy(return_path=RETURN_PATH)


def dsn_report(to: str, final_recipient: str, message_id: str,
               status: str = "5.1.1", diagnostic: str = "smtp; 550 5.1.1 user unknown") -> bytes:
    return (
        f"From: MAILER-DAEMON@mx.attacker.example\r\nTo: {to}\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@mx.attacker.example>\r\nSubject: Undelivered\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\r\n\r\n'
        "--B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"
        "--B\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.attacker.example\r\n\r\n"
        f"Final-Recipient: rfc822; {final_recipient}\r\nAction: failed\r\n"
        f"Status: {status}\r\nDiagnostic-Code: {diagnostic}\r\n\r\n"
        "--B\r\nContent-Type: text/rfc822-headers\r\n\r\n"
        f"Message-ID: {message_id}\r\nFrom: shop@shop.example\r\nTo: {final_recipient}\r\n"
        "--B--\r\n"
    ).encode()


def arf_report(message_id: str, enclosed_to: str, feedback_type: str = "abuse",
               original_rcpt_to: str | None = None) -> bytes:
    rcpt = f"Original-Rcpt-To: {original_rcpt_to}\r\n" if original_rcpt_to else ""
    return (
        "From: fbl@isp.example\r\nTo: fbl@shop.example\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@isp.example>\r\nSubject: FW: report\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=feedback-report; boundary="B"\r\n\r\n'
        "--B\r\nContent-Type: text/plain\r\n\r\nThis is an abuse report.\r\n"
        "--B\r\nContent-Type: message/feedback-report\r\n\r\n"
        f"Feedback-Type: {feedback_type}\r\nUser-Agent: isp-fbl/1.0\r\nVersion: 1\r\n{rcpt}"
        "\r\n--B\r\nContent-Type: text/rfc822-headers\r\n\r\n"
        f"Message-ID: {message_id}\r\nFrom: shop@shop.example\r\nTo: {enclosed_to}\r\n"
        "--B--\r\n"
    ).encode()


def run(engine: Engine, raw: bytes) -> Result:
    with engine.begin() as conn:
        return ingest(conn, dsn.parse(raw), POLICY)


def suppressed(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(select(suppressions.c.address)))


def stored_types(engine: Engine) -> list[tuple[str, int | None]]:
    with engine.connect() as conn:
        return [(t, o) for t, o in conn.execute(
            select(events.c.type, events.c.outbox_id).order_by(events.c.id))]


def test_a_forged_dsn_naming_anyone_suppresses_nobody(engine: Engine) -> None:
    raw = dsn_report("bounces@shop.example", "billing@bigcustomer.example",
                     "<made-up@shop.example>")
    result = run(engine, raw)
    assert (result.stored, result.unverified, result.suppressed) == (1, 1, ())
    assert suppressed(engine) == set()
    assert stored_types(engine) == [("bounced", None)]  # kept, visible, acting on nothing


def test_a_forged_arf_listing_10000_addresses_suppresses_nobody(engine: Engine) -> None:
    victims = ", ".join(f"customer{i}@bigcustomer.example" for i in range(10_000))
    result = run(engine, arf_report("<made-up@shop.example>", victims))
    assert (result.stored, result.unverified, result.suppressed) == (1, 1, ())
    assert suppressed(engine) == set()


def test_an_arf_about_our_message_acts_on_its_recipient_not_the_enclosed_to(
        engine: Engine) -> None:
    _rid, _pid, message_id = sent_row(engine, "reader@mail.example")
    victims = ", ".join(f"customer{i}@bigcustomer.example" for i in range(1000))
    result = run(engine, arf_report(message_id, victims))
    assert result.suppressed == ("reader@mail.example",)
    assert suppressed(engine) == {"reader@mail.example"}


def test_a_dsn_to_an_unsigned_verp_address_suppresses_nobody(engine: Engine) -> None:
    rid, _pid, _mid = sent_row(engine, "victim@mail.example")
    # The attacker knows the row id (ids are sequential), not the address or the secret.
    raw = dsn_report(f"bounces+{rid}@shop.example", "", "<made-up@shop.example>")
    try:
        result = run(engine, raw)
    except dsn.ReportError:
        result = Result()
    assert result.suppressed == ()
    assert suppressed(engine) == set()


def test_a_dsn_with_a_forged_verp_tag_suppresses_nobody(engine: Engine) -> None:
    rid, _pid, _mid = sent_row(engine, "victim@mail.example")
    other = ReturnPath("bounces+{id}@shop.example", "the-attackers-own-secret")
    for address in (f"bounces+{rid}-0000000000000000@shop.example", other.for_row(rid)):
        result = run(engine, dsn_report(address, "victim@mail.example",
                                        f"<{uuid.uuid4().hex}@shop.example>"))
        assert (result.matched, result.unverified, result.suppressed) == (0, 1, ())
    assert suppressed(engine) == set()


def test_the_signed_verp_address_links_and_acts(engine: Engine) -> None:
    """The control: the same report through the real return path does suppress."""
    rid, _pid, _mid = sent_row(engine, "victim@mail.example")
    result = run(engine, dsn_report(RETURN_PATH.for_row(rid), "victim@mail.example",
                                    "<made-up@shop.example>"))
    assert (result.matched, result.unverified) == (1, 0)
    assert result.suppressed == ("victim@mail.example",)


def test_a_report_about_our_message_naming_someone_else_suppresses_nobody(
        engine: Engine) -> None:
    rid, _pid, message_id = sent_row(engine, "real@mail.example")
    for raw in (dsn_report("bounces@shop.example", "billing@bigcustomer.example", message_id),
                dsn_report(RETURN_PATH.for_row(rid), "billing@bigcustomer.example",
                           "<made-up@shop.example>"),
                arf_report(message_id, "x@y.example",
                           original_rcpt_to="billing@bigcustomer.example")):
        result = run(engine, raw)
        assert (result.unverified, result.suppressed) == (1, ())
    assert suppressed(engine) == set()


def test_a_redacted_complaint_acts_on_the_linked_recipient(engine: Engine) -> None:
    _rid, _pid, message_id = sent_row(engine, "reader@mail.example")
    result = run(engine, arf_report(message_id, "redacted@isp.example",
                                    original_rcpt_to="xxxxxxxx@isp.example"))
    assert result.suppressed == ("reader@mail.example",)
    assert "xxxxxxxx@isp.example" not in suppressed(engine)


def test_an_authentication_failure_report_is_no_complaint(engine: Engine) -> None:
    rid, _pid, message_id = sent_row(engine, "reader@mail.example")
    result = run(engine, arf_report(message_id, "reader@mail.example",
                                    feedback_type="auth-failure"))
    assert result.suppressed == ()
    assert stored_types(engine) == [("auth_failure", rid)]


def test_unverified_soft_bounces_do_not_add_up_to_a_suppression(engine: Engine) -> None:
    for _ in range(5):
        run(engine, dsn_report("bounces@shop.example", "victim@mail.example",
                               f"<{uuid.uuid4().hex}@shop.example>", status="4.2.2",
                               diagnostic="smtp; 452 4.2.2 mailbox full"))
    assert suppressed(engine) == set()


def test_a_sender_side_bounce_suppresses_nobody(engine: Engine) -> None:
    _rid, _pid, message_id = sent_row(engine, "reader@mail.example")
    result = run(engine, dsn_report(
        "bounces@shop.example", "reader@mail.example", message_id, status="5.1.8",
        diagnostic="smtp; 553 5.1.8 Domain of sender address bounces@shop.example "
                   "does not exist"))
    assert (result.matched, result.suppressed) == (1, ())
    assert result.sender_rejected == 1
