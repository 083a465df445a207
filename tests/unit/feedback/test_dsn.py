"""The DSN (RFC 3464) and ARF (RFC 5965) parser on a corpus of real-world-shaped reports."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailout.feedback import dsn
from mailout.models import BounceKind, EventType, Provider

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "dsn"


def _events(name: str) -> list[dsn.Event]:
    return dsn.parse((CORPUS / name).read_bytes(), name)


def test_postfix_hard_bounce_links_by_message_id_and_verp() -> None:
    [event] = _events("postfix_hard.eml")
    assert event.provider is Provider.DSN
    assert event.type is EventType.BOUNCED
    assert event.subtype == BounceKind.HARD
    assert event.recipient == "nobody@gmail.example"
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee41@shop.example>"
    assert event.return_path == "bounces+41@shop.example"
    assert event.diagnostic is not None
    assert event.diagnostic.startswith("5.1.1 smtp; 550-5.1.1")
    assert "\n" not in event.diagnostic
    assert event.occurred_at == datetime(2025, 1, 14, 10, 2, 11, tzinfo=UTC)  # Arrival-Date


def test_postfix_gave_up_on_a_full_mailbox_is_a_soft_bounce() -> None:
    [event] = _events("postfix_soft.eml")
    assert (event.type, event.subtype) == (EventType.BOUNCED, BounceKind.SOFT)
    assert event.occurred_at == datetime(2025, 1, 17, 10, 5, 40, tzinfo=UTC)  # Last-Attempt


def test_exim_generic_status_defers_to_the_diagnostic_code() -> None:
    [event] = _events("exim_hard.eml")
    assert (event.type, event.subtype) == (EventType.BOUNCED, BounceKind.HARD)
    assert event.recipient == "old.customer@example.org"
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee43@shop.example>"
    assert event.return_path == "bounces+43@shop.example"  # Envelope-to


def test_gmail_style_report_inside_nested_multiparts() -> None:
    [event] = _events("gmail_hard.eml")
    assert (event.type, event.subtype) == (EventType.BOUNCED, BounceKind.HARD)
    assert event.recipient == "typo.name@gmial.example"
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee44@shop.example>"
    assert event.occurred_at == datetime(2025, 1, 16, 20, 1, 7, tzinfo=UTC)


def test_microsoft_style_ndr() -> None:
    [event] = _events("microsoft_hard.eml")
    assert (event.type, event.subtype) == (EventType.BOUNCED, BounceKind.HARD)
    assert event.recipient == "former.employee@contoso.example"
    assert event.diagnostic is not None
    assert "RESOLVER.ADR.RecipientNotFound" in event.diagnostic
    assert event.return_path == "bounces+45@shop.example"  # the To of the NDR


def test_multi_recipient_dsn_gives_one_event_per_recipient() -> None:
    events = _events("multi_recipient.eml")
    got = {(e.recipient, e.type, e.subtype) for e in events}
    assert got == {
        ("gone@one.example", EventType.BOUNCED, BounceKind.HARD),
        ("blocked@two.example", EventType.BOUNCED, BounceKind.SOFT),  # 5.7.1: our IP, not them
        ("slow@three.example", EventType.DEFERRED, None),
        ("fine@four.example", EventType.DELIVERED, None),
    }
    assert len({e.event_id for e in events}) == 4
    assert all(e.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee46@shop.example>" for e in events)
    # The original's Return-Path, without a VERP tag: ingest cannot link on it.
    assert {e.return_path for e in events} == {"bounces@shop.example"}


def test_arf_complaint_names_the_recipient_and_feedback_type() -> None:
    [event] = _events("arf_yahoo.eml")
    assert event.provider is Provider.ARF
    assert (event.type, event.subtype) == (EventType.COMPLAINED, "abuse")
    assert event.recipient == "annoyed.reader@yahoo.example"
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee47@shop.example>"
    assert event.return_path == "bounces+47@shop.example"


def test_redacted_arf_is_kept_with_the_message_id_for_linking() -> None:
    [event] = _events("arf_microsoft_redacted.eml")
    assert event.type is EventType.COMPLAINED
    assert event.message_id == "<c0ffee00c0ffee00c0ffee00c0ffee48@shop.example>"
    # The enclosed To: is never read (a forged report could list anyone there): the
    # complaint names nobody, and ingestion acts on the linked row's recipient.
    assert event.recipient == ""


def test_the_same_report_parsed_twice_gives_the_same_ids() -> None:
    assert [e.event_id for e in _events("multi_recipient.eml")] == \
        [e.event_id for e in _events("multi_recipient.eml")]


@pytest.mark.parametrize(("name", "reason"), [
    ("not_a_bounce.eml", "not a bounce: no delivery-status"),
    ("malformed_no_recipients.eml", "names no recipient"),
    ("malformed_truncated.eml", "not a bounce: no delivery-status"),
])
def test_malformed_reports_are_refused_with_a_reason(name: str, reason: str) -> None:
    with pytest.raises(dsn.ReportError, match=reason) as caught:
        _events(name)
    assert caught.value.source == name
    assert isinstance(caught.value, ValueError)


def test_a_plain_text_qmail_bounce_is_read_conservatively() -> None:
    [event] = _events("malformed_plaintext.eml")
    assert event.provider is Provider.TEXT_BOUNCE
    assert (event.type, event.recipient) == (EventType.BOUNCED, "someone@oldmta.example")
    # "no mailbox here by that name (#5.1.1)": a known permanent mailbox failure.
    assert (event.subtype, event.reason) == (BounceKind.HARD, "mailbox_unknown")
    assert event.message_id is None  # nothing to link it by: ingestion keeps it unverified


def test_empty_and_oversized_input_are_refused() -> None:
    with pytest.raises(dsn.ReportError, match="empty"):
        dsn.parse(b"  \n")
    with pytest.raises(dsn.ReportError, match="larger than"):
        dsn.parse(b"x" * (dsn.MAX_REPORT_BYTES + 1))


@pytest.mark.parametrize(("status", "diagnostic", "kind"), [
    ("5.1.1", None, BounceKind.HARD),
    ("5.2.1", None, BounceKind.SOFT),  # disabled: may come back (Sisimai: suspend)
    ("5.2.2", None, BounceKind.SOFT),
    ("5.7.1", None, BounceKind.SOFT),
    ("4.4.7", None, BounceKind.SOFT),
    ("5.0.0", "550 5.1.1 user unknown", BounceKind.HARD),
    ("5.0.0", None, BounceKind.SOFT),  # says nothing: never suppress on a guess
    ("", "550 no such user", BounceKind.HARD),
    ("", "450 no such user", BounceKind.SOFT),
])
def test_bounce_kind(status: str, diagnostic: str | None, kind: BounceKind) -> None:
    assert dsn.bounce_kind(status, diagnostic) is kind


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_give_events_or_a_report_error(data: bytes) -> None:
    try:
        events = dsn.parse(data)
    except dsn.ReportError:
        return
    assert all(isinstance(e, dsn.Event) for e in events)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=4000), st.binary(max_size=50))
def test_mangled_real_reports_give_events_or_a_report_error(cut: int, junk: bytes) -> None:
    raw = (CORPUS / "multi_recipient.eml").read_bytes()
    try:
        events = dsn.parse(raw[:cut] + junk + raw[cut + len(junk):])
    except dsn.ReportError:
        return
    assert all(e.recipient == e.recipient.lower() for e in events)
