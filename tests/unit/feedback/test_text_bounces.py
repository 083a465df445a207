"""Prose bounces that flufl.bounce's detectors do not read (issue 32): the failed
recipients from the bounce's own words, a refusal of our MAIL FROM as sender-side, and
the returned original's Message-ID wherever the MTA put it. The fixtures reproduce the
patterns of set-of-emails messages that mailout did not read before (README.md there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailout.feedback import dsn
from mailout.feedback.bounce_rules import Reason, classify
from mailout.models import BounceKind, EventType, Provider

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dsn"


def _parse(name: str) -> list[dsn.Event]:
    return dsn.parse((FIXTURES / name).read_bytes(), name)


def test_the_address_under_a_failure_heading_is_read_not_the_help_desk() -> None:
    [event] = _parse("prose_failure_reasons.eml")
    assert event.provider is Provider.TEXT_BOUNCE
    assert (event.recipient, event.subtype, event.reason) == (
        "lee@customer.example", BounceKind.HARD, "mailbox_unknown")
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee51@shop.example>"


def test_a_gateway_summary_names_its_recipient_on_its_rcpt_to_line() -> None:
    [event] = _parse("prose_mobile_gateway.eml")
    assert event.recipient == "5550100@mms.mobile.example"
    assert event.type is EventType.BOUNCED


def test_a_text_that_names_nobody_stands_for_the_returned_originals_recipient() -> None:
    [event] = _parse("sendmail_text_only_deferred.eml")
    # "Deferred: Connection timed out" names no address; the original has one recipient.
    assert (event.recipient, event.subtype, event.reason) == (
        "sam@customer.example", BounceKind.SOFT, "expired")
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee52@shop.example>"


@pytest.mark.parametrize("name", ["exim_mail_from_refused.eml",
                                  "sendmail_mail_from_refused.eml"])
def test_a_refusal_of_our_mail_from_is_sender_side_whatever_it_says(name: str) -> None:
    [event] = _parse(name)
    # "Domain does not exist" / "Host unknown" would be hard for a recipient.
    assert (event.recipient, event.subtype, event.reason) == (
        "dana@customer.example", BounceKind.SOFT, "sender_rejected")


def test_the_mail_command_makes_any_refusal_sender_side() -> None:
    verdict = classify(None, "550 5.1.1 <x@y.example>... User unknown", command="MAIL")
    assert (verdict.kind, verdict.reason, verdict.sender_side) == (
        BounceKind.SOFT, Reason.SENDER_REJECTED, True)


def test_a_report_whose_boundary_matches_nothing_is_read_from_its_text() -> None:
    [event] = _parse("broken_boundary_report.eml")
    assert (event.recipient, event.subtype) == ("kim@customer.example", BounceKind.SOFT)


def test_a_delivery_status_without_recipient_fields_gives_the_originals_recipient() -> None:
    [event] = _parse("postfix_no_recipient_fields.eml")
    assert (event.recipient, event.type, event.subtype) == (
        "ali@customer.example", EventType.BOUNCED, BounceKind.SOFT)
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee56@shop.example>"


_REPORT_HEAD = ("From: MAILER-DAEMON@gw.customer.example\r\nTo: bounces@shop.example\r\n"
                "Subject: Returned mail\r\nMIME-Version: 1.0\r\n"
                'Content-Type: multipart/mixed; boundary="Z"\r\n\r\n'
                "--Z\r\nContent-Type: text/plain\r\n\r\n"
                "Delivery to the following recipients failed permanently:\r\n\r\n"
                "   * lee@customer.example\r\n\r\n")
_ORIGINAL = ("Message-ID: <c0ffee00c0ffee00c0ffee00c0ffee57@shop.example>\r\n"
             "From: noreply@shop.example\r\nTo: lee@customer.example\r\nSubject: Hi\r\n\r\n"
             "Hello\r\n")


@pytest.mark.parametrize("original", [
    # message/rfc822 whose headers follow a blank line: the parser reads them as body.
    "--Z\r\nContent-Type: message/rfc822\r\n\r\n\r\n" + _ORIGINAL,
    # the original's headers right after the boundary: taken for the part's own.
    "--Z\r\n" + _ORIGINAL,
])
def test_the_originals_message_id_is_found_where_mtas_misplace_it(original: str) -> None:
    [event] = dsn.parse((_REPORT_HEAD + original + "--Z--\r\n").encode())
    assert event.recipient == "lee@customer.example"
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee57@shop.example>"


def test_addresses_in_links_and_paths_are_never_recipients() -> None:
    raw = (FIXTURES / "prose_failure_reasons.eml").read_bytes().replace(
        b"lee@customer.example\n\n",
        b"lee@customer.example\nFailed: see https://help.example/x?to=ops@help.example and "
        b"arn:aws:ses:identity/noreply@shop.example\n\n", 1)
    assert [e.recipient for e in dsn.parse(raw)] == ["lee@customer.example"]
