"""Reports shaped like the messages of Sisimai's set-of-emails that mailout misread
before (issue 32; ``python -m bench.bounces``): each fixture reproduces one pattern
(tests/fixtures/dsn/README.md names the corpus files)."""

from __future__ import annotations

from pathlib import Path

from mailout.feedback import dsn, report_parts
from mailout.models import BounceKind, EventType

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "dsn"
HARD, SOFT = BounceKind.HARD, BounceKind.SOFT


def _by_recipient(name: str) -> dict[str, dsn.Event]:
    return {e.recipient: e for e in dsn.parse((CORPUS / name).read_bytes(), name)}


def test_an_unknown_user_claimed_after_data_is_a_filter_not_a_hard_bounce() -> None:
    event = _by_recipient("postfix_after_data.eml")["kept@carrier.example"]
    assert (event.subtype, event.reason) == (SOFT, "policy")


def test_a_pipelined_transcript_tells_rcpt_replies_from_the_data_reply() -> None:
    events = _by_recipient("sendmail_pipelined.eml")
    # "<<< 550 ... User unknown" then "<<< 503 Need RCPT": the 550 answered RCPT.
    assert (events["gone@customer.example"].subtype,
            events["gone@customer.example"].reason) == (HARD, "mailbox_unknown")
    # The last reply under ">>> DATA" is DATA's own: the message was judged.
    assert (events["judged@bigmail.example"].subtype,
            events["judged@bigmail.example"].reason) == (SOFT, "policy")


def test_without_a_diagnostic_code_the_text_says_why_per_address() -> None:
    events = _by_recipient("opensmtpd_text_only.eml")
    found = {a: (e.subtype, e.reason) for a, e in events.items()}
    assert found == {"gone@customer.example": (HARD, "mailbox_unknown"),
                     "full@customer.example": (SOFT, "mailbox_full"),
                     "nodomain@nx.example": (HARD, "domain_unknown")}


def test_several_recipients_in_one_block_are_each_read() -> None:
    events = _by_recipient("aol_one_block.eml")
    assert {a: (e.subtype, e.reason) for a, e in events.items()} == {
        "full@customer.example": (SOFT, "mailbox_full"),
        "gone@customer.example": (HARD, "mailbox_unknown")}


def test_a_reply_continued_flush_left_does_not_hide_the_recipient() -> None:
    [event] = _by_recipient("messagelabs_flush_left.eml").values()
    assert event.recipient == "dana@customer.example"
    assert event.type is EventType.BOUNCED
    assert event.subtype == SOFT
    assert event.diagnostic is not None
    assert "without authentication" in event.diagnostic


def test_a_pipe_recipient_is_named_by_exims_generated_by_line() -> None:
    [event] = _by_recipient("exim_pipe_generated_by.eml").values()
    assert event.recipient == "dana@customer.example"


def test_a_bare_host_recipient_is_named_by_sendmails_fatal_errors_list() -> None:
    [event] = _by_recipient("sendmail_bare_host_recipient.eml").values()
    assert (event.recipient, event.subtype, event.reason) == (
        "dana@nx-customer.example", HARD, "domain_unknown")


def test_an_arf_draft_opt_out_names_its_removal_recipient() -> None:
    [event] = _by_recipient("arf_draft_opt_out.eml").values()
    assert (event.recipient, event.type, event.subtype) == (
        "dana@mailbox.example", EventType.COMPLAINED, "opt-out")


def test_a_japanese_diagnostic_in_raw_iso_2022_jp_is_read() -> None:
    [event] = _by_recipient("domino_iso_2022_jp.eml").values()
    assert (event.subtype, event.reason) == (HARD, "mailbox_unknown")
    assert event.diagnostic is not None
    assert "見つかりません" in event.diagnostic


def test_a_quoted_local_part_is_kept_as_written() -> None:
    # Postfix: Final-Recipient: rfc822; "neko....nyaan...."@example.org
    assert report_parts.recipient_address('rfc822; "a....b...."@customer.example') == \
        '"a....b...."@customer.example'
    assert report_parts.recipient_address('rfc822; "|/bin/sh"@customer.example') == ""


def test_recipients_in_one_block_are_bounded_like_blocks() -> None:
    fields = "".join(f"Final-Recipient: rfc822; u{i}@customer.example\r\nAction: failed\r\n"
                     for i in range(5 * dsn.MAX_RECIPIENT_BLOCKS))
    data = ("From: MAILER-DAEMON@mx.example\r\nMIME-Version: 1.0\r\n"
            'Content-Type: multipart/report; report-type=delivery-status; boundary="R"\r\n\r\n'
            "--R\r\nContent-Type: message/delivery-status\r\n\r\n"
            f"Reporting-MTA: dns; mx.example\r\n{fields}\r\n--R--\r\n").encode()
    events = dsn.parse(data)
    assert len(events) == dsn.MAX_RECIPIENT_BLOCKS + 1
