"""What real MTAs send that RFC 3464 does not quite describe, and hostile input: each
case issue 32 measured as unread, misread or crashing."""

from __future__ import annotations

import pytest

from mailout.feedback import dsn, plain_bounces, report_parts
from mailout.models import BounceKind, EventType, Provider

ORIGINAL = (
    "Message-ID: <c0ffee00c0ffee00c0ffee00c0ffee99@shop.example>\r\n"
    "From: shop@shop.example\r\nTo: dana@customer.example\r\nSubject: Your order\r\n"
)


def report(status_part: str, wrapper: str | None = None) -> bytes:
    """A DSN with ``status_part`` as its message/delivery-status body; ``wrapper``
    wraps the whole report in another multipart (as OpenSMTPD and Domino do)."""
    inner = (
        'Content-Type: multipart/report; report-type=delivery-status; boundary="R"\r\n\r\n'
        "--R\r\nContent-Type: text/plain\r\n\r\nDelivery failed.\r\n"
        f"--R\r\nContent-Type: message/delivery-status\r\n\r\n{status_part}\r\n"
        f"--R\r\nContent-Type: text/rfc822-headers\r\n\r\n{ORIGINAL}--R--\r\n"
    )
    head = "From: MAILER-DAEMON@mx.example\r\nTo: bounces@shop.example\r\nMIME-Version: 1.0\r\n"
    if wrapper is None:
        return (head + inner).encode()
    return (head + f'Content-Type: {wrapper}; boundary="W"\r\n\r\n'
            "--W\r\nContent-Type: text/plain\r\n\r\nSee the attached report.\r\n"
            f"--W\r\n{inner}--W--\r\n").encode()


PER_RECIPIENT = ("Reporting-MTA: dns; mx.example\r\n\r\n"
                 "Final-Recipient: rfc822; dana@customer.example\r\nAction: failed\r\n"
                 "Status: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1 user unknown\r\n")


@pytest.mark.parametrize("wrapper", ["multipart/mixed", "multipart/alternative"])
def test_a_report_wrapped_in_another_multipart_is_read(wrapper: str) -> None:
    [event] = dsn.parse(report(PER_RECIPIENT, wrapper))
    assert (event.recipient, event.type, event.subtype) == (
        "dana@customer.example", EventType.BOUNCED, BounceKind.HARD)
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee99@shop.example>"


def test_per_message_and_recipient_fields_in_one_block() -> None:
    combined = ("Reporting-MTA: dns; mx.example\r\nArrival-Date: Fri, 24 Jan 2025 03:00:00 +0000"
                "\r\nFinal-Recipient: rfc822; dana@customer.example\r\nAction: failed\r\n"
                "Status: 5.1.1\r\n")
    [event] = dsn.parse(report(combined))
    assert (event.recipient, event.reason) == ("dana@customer.example", "mailbox_unknown")


@pytest.mark.parametrize(("action", "kind"), [
    ("failed (Bad destination mailbox address)", EventType.BOUNCED),
    ("failure", EventType.BOUNCED),
    ("expired", EventType.BOUNCED),
    ("deliverable", EventType.DELIVERED),
    ("Delayed", EventType.DEFERRED),
])
def test_actions_with_comments_and_non_standard_values(action: str, kind: EventType) -> None:
    block = PER_RECIPIENT.replace("Action: failed", f"Action: {action}")
    [event] = dsn.parse(report(block))
    assert event.type is kind


def test_a_missing_action_is_taken_from_the_status_class() -> None:
    [event] = dsn.parse(report(PER_RECIPIENT.replace("Action: failed\r\n", "")))
    assert event.type is EventType.BOUNCED


def test_an_rfc822_original_recipient_beats_an_x400_final_recipient() -> None:
    block = PER_RECIPIENT.replace(
        "Final-Recipient: rfc822; dana@customer.example",
        "Final-Recipient: x400; /s=dana/ou=sales/prmd=customer/admd= /c=gb/\r\n"
        "Original-Recipient: rfc822; Dana@Customer.example")
    [event] = dsn.parse(report(block))
    assert event.recipient == "dana@customer.example"


@pytest.mark.parametrize("junk", [
    "undisclosed recipients", "undisclosed", "|/usr/local/bin/procmail -f-",
    "/mail/spool/dana", "@mx.example.org", "dana@localhost", "dana\x00@customer.example",
])
def test_junk_is_never_a_recipient(junk: str) -> None:
    block = PER_RECIPIENT.replace("rfc822; dana@customer.example", f"rfc822; {junk}")
    events = dsn.parse(report(block))
    assert [e.recipient for e in events] == [""]  # stored without one: it acts on nothing


def test_a_source_route_gives_the_mailbox_at_its_end() -> None:
    assert report_parts.recipient_address(
        "rfc822; <@smtp.example.net:dana@customer.example>") == "dana@customer.example"


def test_the_innermost_code_and_the_reason_are_kept() -> None:
    block = PER_RECIPIENT.replace(
        "Diagnostic-Code: smtp; 550 5.1.1 user unknown",
        "Diagnostic-Code: smtp; 5.1.0 - Unknown address error 550-'5.2.2 mailbox full'")
    [event] = dsn.parse(report(block))
    assert (event.subtype, event.reason) == (BounceKind.SOFT, "mailbox_full")
    assert event.diagnostic is not None
    assert event.diagnostic.startswith("5.2.2 (Status 5.1.1)")


def test_deeply_nested_multiparts_are_refused_not_a_crash() -> None:
    depth = 3000  # about 120 KB: Message.walk() and the parser recurse per level
    opening = "".join(f'Content-Type: multipart/mixed; boundary="b{i}"\r\n\r\n--b{i}\r\n'
                      for i in range(depth))
    with pytest.raises(dsn.ReportError):
        dsn.parse(("From: x@example.com\r\n" + opening + "text\r\n").encode())


def test_nuls_and_undecodable_bytes_are_cleaned() -> None:
    raw = report(PER_RECIPIENT.replace("Diagnostic-Code: smtp; 550 5.1.1 user unknown",
                                       "Diagnostic-Code: smtp; 550 5.1.1 us\x00er \xff\xfe")
                 .replace("Status: 5.1.1", "Status: 5.1.1\x00"))
    raw = raw.replace(b"Reporting-MTA: dns; mx.example", b"Reporting-MTA: dns; mx\xff.example")
    [event] = dsn.parse(raw)
    for text in (event.recipient, event.diagnostic or "", event.payload):
        assert "\x00" not in text
        text.encode("utf-8")  # no lone surrogates: every database stores it


QMAIL = (
    "From: MAILER-DAEMON@mx.customer.example\r\nTo: bounces@shop.example\r\n"
    "Subject: failure notice\r\n\r\n"
    "Hi. This is the qmail-send program at mx.customer.example.\r\n"
    "I'm afraid I wasn't able to deliver your message to the following addresses.\r\n"
    "This is a permanent error; I've given up. Sorry it didn't work out.\r\n\r\n"
    "<dana@customer.example>:\r\n{reply}\r\n\r\n"
    "--- Below this line is a copy of the message.\r\n\r\n"
    "Return-Path: <bounces@shop.example>\r\n" + ORIGINAL + "\r\nHello\r\n"
)


@pytest.mark.parametrize(("reply", "kind", "reason"), [
    ("Sorry, no mailbox here by that name. (#5.1.1)", BounceKind.HARD, "mailbox_unknown"),
    ("552 5.2.2 mailbox full", BounceKind.SOFT, "mailbox_full"),
    ("Connection refused by the remote host", BounceKind.SOFT, "network"),
    ("550 rejected because your IP is listed at zen.spamhaus.org", BounceKind.SOFT,
     "spam_block"),
])
def test_plain_text_bounces_are_read_and_judged_conservatively(
        reply: str, kind: BounceKind, reason: str) -> None:
    [event] = dsn.parse(QMAIL.format(reply=reply).encode())
    assert event.provider is Provider.TEXT_BOUNCE
    assert (event.recipient, event.subtype, event.reason) == (
        "dana@customer.example", kind, reason)
    # Linked like any report: by the returned original's Message-ID.
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee99@shop.example>"


def test_flufl_bounce_private_detector_list_is_as_pinned() -> None:
    """plain_bounces runs flufl.bounce's detectors one by one from its private
    ``_DETECTORS`` (its all_failures stops at the first detector that raises)."""
    from importlib.metadata import version

    from flufl.bounce._scan import _DETECTORS

    major = int(version("flufl.bounce").split(".")[0])
    assert 4 <= major <= 6, "plain_bounces was checked against flufl.bounce 4 to 6"
    assert len(_DETECTORS) >= 10
    assert all(callable(getattr(d(), "process", None)) for d in _DETECTORS)
    assert plain_bounces.MAX_ADDRESSES > 0
