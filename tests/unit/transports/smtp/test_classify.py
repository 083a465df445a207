"""classify(): one row per rule, plus the reply-text parsers."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailout.transports.base import Decision, SendResult
from mailout.transports.smtp.classify import (
    Verdict,
    classify,
    parse_enhanced_code,
    parse_provider_id,
    to_result,
)
from mailout.transports.smtp.outcome import Failure, Reply, SendOutcome, Stage
from mailout.transports.smtp.settings import SmtpSettings, TlsMode

ALL_STAGES = list(Stage)
BEFORE_BODY = [stage for stage in Stage if stage is not Stage.BODY]
BEFORE_MAIL_ACCEPTED = {Stage.CONNECT, Stage.EHLO, Stage.STARTTLS, Stage.AUTH, Stage.MAIL}


def reply(stage: Stage, code: int, text: str = "", enhanced: str | None = None) -> SendOutcome:
    return SendOutcome(stage, Reply(code, text, enhanced), Failure.REPLY)


def broken(stage: Stage, failure: Failure) -> SendOutcome:
    return SendOutcome(stage, None, failure, detail="test")


CASES = [
    # accepted
    (
        "250 after body",
        SendOutcome(Stage.BODY, Reply(250, "2.0.0 Ok: queued as X")),
        "sent",
        "accepted",
    ),
    ("accepted without reply", SendOutcome(Stage.BODY), "sent", "accepted"),
    # the transport's fault, before MAIL FROM was accepted: an outage, uncharged
    ("refused", broken(Stage.CONNECT, Failure.REFUSED), "outage", "connect_refused"),
    ("dns", broken(Stage.CONNECT, Failure.DNS), "outage", "dns_failure"),
    ("timeout at connect", broken(Stage.CONNECT, Failure.TIMEOUT), "outage", "timeout"),
    ("timeout at ehlo", broken(Stage.EHLO, Failure.TIMEOUT), "outage", "timeout"),
    ("timeout at auth", broken(Stage.AUTH, Failure.TIMEOUT), "outage", "timeout"),
    ("disconnect at starttls", broken(Stage.STARTTLS, Failure.DISCONNECT), "outage",
     "disconnect"),
    ("disconnect at mail", broken(Stage.MAIL, Failure.DISCONNECT), "outage", "disconnect"),
    ("421 greeting", reply(Stage.CONNECT, 421, "4.3.2 busy"), "outage", "service_not_available"),
    ("421 ehlo", reply(Stage.EHLO, 421), "outage", "service_not_available"),
    (
        "454 starttls",
        reply(Stage.STARTTLS, 454, "4.7.0 TLS not available"),
        "outage",
        "transient_reply",
    ),
    (
        "454 auth",
        reply(Stage.AUTH, 454, "4.7.0 Temporary auth failure"),
        "outage",
        "transient_reply",
    ),
    ("451 mail", reply(Stage.MAIL, 451, "4.3.0 try later"), "outage", "transient_reply"),
    # this message's fault, after MAIL FROM was accepted: charged retry
    ("timeout at rcpt", broken(Stage.RCPT, Failure.TIMEOUT), "retry", "timeout"),
    ("disconnect at data", broken(Stage.DATA, Failure.DISCONNECT), "retry", "disconnect"),
    ("timeout at data", broken(Stage.DATA, Failure.TIMEOUT), "retry", "timeout"),
    ("421 at body", reply(Stage.BODY, 421), "retry", "service_not_available"),
    ("452 4.2.2 rcpt", reply(Stage.RCPT, 452, "4.2.2 Mailbox full"), "retry", "mailbox_full"),
    ("450 4.2.2 given", reply(Stage.RCPT, 450, "full", "4.2.2"), "retry", "mailbox_full"),
    ("451 body", reply(Stage.BODY, 451, "4.3.0 try later"), "retry", "transient_reply"),
    # configuration errors: pause, whatever the stage
    ("535 auth", reply(Stage.AUTH, 535, "5.7.8 bad credentials"), "pause", "bad_credentials"),
    (
        "530 mail",
        reply(Stage.MAIL, 530, "5.7.0 Must issue STARTTLS first"),
        "pause",
        "auth_required",
    ),
    ("530 rcpt", reply(Stage.RCPT, 530, "5.7.0 Authentication required"), "pause", "auth_required"),
    (
        "538 auth",
        reply(Stage.AUTH, 538, "5.7.11 Encryption required"),
        "pause",
        "encryption_required",
    ),
    ("tls at connect", broken(Stage.CONNECT, Failure.TLS), "pause", "tls_failure"),
    ("tls at starttls", broken(Stage.STARTTLS, Failure.TLS), "pause", "tls_failure"),
    ("554 greeting", reply(Stage.CONNECT, 554, "5.7.1 no service"), "pause", "greeting_rejected"),
    ("550 ehlo", reply(Stage.EHLO, 550, "go away"), "pause", "ehlo_rejected"),
    (
        "502 starttls",
        reply(Stage.STARTTLS, 502, "5.5.1 not supported"),
        "pause",
        "starttls_rejected",
    ),
    ("504 auth", reply(Stage.AUTH, 504, "5.5.4 mechanism"), "pause", "auth_rejected"),
    # a reply no such server gives at that stage: the settings point elsewhere
    ("250 to auth", reply(Stage.AUTH, 250, "ok"), "pause", "unexpected_reply"),
    ("334 greeting", reply(Stage.CONNECT, 334), "pause", "unexpected_reply"),
    ("garbage at ehlo", reply(Stage.EHLO, 999), "pause", "unexpected_reply"),
    # permanent for this message
    ("550 5.1.1 rcpt", reply(Stage.RCPT, 550, "5.1.1 No such user"), "failed",
     "recipient_rejected"),
    ("550 mail", reply(Stage.MAIL, 550, "5.7.1 Sender rejected"), "failed", "sender_rejected"),
    ("554 data", reply(Stage.DATA, 554, "5.5.1 No valid recipients"), "failed", "permanent_reply"),
    ("552 5.3.4 body", reply(Stage.BODY, 552, "5.3.4 Message too big"), "failed",
     "message_too_big"),
    (
        "554 5.7.1 body",
        reply(Stage.BODY, 554, "5.7.1 Rejected by policy"),
        "failed",
        "permanent_reply",
    ),
    # the final "." was sent but the reply got lost
    (
        "disconnect at body",
        broken(Stage.BODY, Failure.DISCONNECT),
        "unknown",
        "lost_reply_after_data",
    ),
    ("timeout at body", broken(Stage.BODY, Failure.TIMEOUT), "unknown", "lost_reply_after_data"),
    ("tls at body", broken(Stage.BODY, Failure.TLS), "unknown", "lost_reply_after_data"),
    # unforeseen
    (
        "reply failure, no reply",
        SendOutcome(Stage.RCPT, None, Failure.REPLY),
        "retry",
        "unexpected_outcome",
    ),
    ("354 as a failure", reply(Stage.DATA, 354), "retry", "unexpected_outcome"),
    ("nonsense code", reply(Stage.MAIL, 999), "retry", "unexpected_outcome"),
    ("250 as failure at body", reply(Stage.BODY, 250), "unknown", "unexpected_outcome"),
    (
        "accepted with 550",
        SendOutcome(Stage.RCPT, Reply(550, "5.1.1 x")),
        "failed",
        "recipient_rejected",
    ),
]


@pytest.mark.parametrize(
    ("outcome", "action", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_classify(outcome: SendOutcome, action: str, reason: str) -> None:
    assert classify(outcome) == Verdict(Decision(action), reason)


@pytest.mark.parametrize("stage", ALL_STAGES)
@pytest.mark.parametrize("code", [421, 450, 451, 452, 454])
def test_a_transient_reply_is_an_outage_before_mail_is_accepted_else_a_retry(
    stage: Stage, code: int
) -> None:
    expected = Decision.OUTAGE if stage in BEFORE_MAIL_ACCEPTED else Decision.RETRY
    assert classify(reply(stage, code)).action is expected


@pytest.mark.parametrize("stage", BEFORE_BODY)
@pytest.mark.parametrize(
    "failure", [Failure.REFUSED, Failure.DNS, Failure.TIMEOUT, Failure.DISCONNECT]
)
def test_connection_trouble_is_an_outage_until_mail_is_accepted(
    stage: Stage, failure: Failure
) -> None:
    expected = Decision.OUTAGE if stage in BEFORE_MAIL_ACCEPTED else Decision.RETRY
    assert classify(broken(stage, failure)).action is expected


@pytest.mark.parametrize("stage", [Stage.CONNECT, Stage.EHLO, Stage.STARTTLS, Stage.AUTH])
@pytest.mark.parametrize("code", [250, 235, 334, 354, 999, 0])
def test_an_unexpected_reply_before_mail_is_a_configuration_error(
    stage: Stage, code: int
) -> None:
    assert classify(reply(stage, code)).action is Decision.PAUSE


def test_a_greeting_timeout_on_port_465_without_implicit_tls_pauses_with_the_diagnosis() -> None:
    timeout = broken(Stage.CONNECT, Failure.TIMEOUT)
    plain = SmtpSettings(host="mx.example", port=465, tls=TlsMode.STARTTLS, password="s3cret")
    result = to_result(timeout, plain)
    assert (result.decision, result.reason) == (Decision.PAUSE, "tls_mode_mismatch")
    assert result.detail is not None
    assert "SMTP_TLS=implicit" in result.detail
    # the same timeout elsewhere is the provider's trouble
    assert to_result(timeout, replace(plain, port=587)).decision is Decision.OUTAGE
    assert to_result(timeout, replace(plain, tls=TlsMode.IMPLICIT)).decision is Decision.OUTAGE


def test_every_pause_carries_the_check_diagnosis_without_the_password() -> None:
    settings = SmtpSettings(host="mx.example", port=587, username="u", password="s3cret")
    result = to_result(reply(Stage.AUTH, 535, "5.7.8 bad s3cret"), settings)
    assert result.decision is Decision.PAUSE
    assert result.detail is not None
    assert "SMTP_USER and SMTP_PASS" in result.detail
    assert "s3cret" not in result.detail


@pytest.mark.parametrize("stage", ALL_STAGES)
@pytest.mark.parametrize("code", [530, 535, 538])
def test_configuration_replies_pause_at_every_stage(stage: Stage, code: int) -> None:
    assert classify(reply(stage, code)).action is Decision.PAUSE


@given(
    stage=st.sampled_from(Stage),
    code=st.integers(min_value=-1000, max_value=1000),
    text=st.text(max_size=50),
    failure=st.none() | st.sampled_from(Failure),
    with_reply=st.booleans(),
)
def test_classify_never_raises(
    stage: Stage, code: int, text: str, failure: Failure | None, with_reply: bool
) -> None:
    outcome = SendOutcome(stage, Reply(code, text) if with_reply else None, failure)
    assert isinstance(classify(outcome).action, Decision)


def test_to_result_carries_the_verdict_the_reply_and_the_provider_id() -> None:
    accepted = SendOutcome(Stage.BODY, Reply(250, "2.0.0 Ok: queued as 4Xyz12AbC", "2.0.0"))
    assert to_result(accepted) == SendResult(
        Decision.SENT, "accepted", provider_id="4Xyz12AbC", stage="body", code=250,
        enhanced="2.0.0", text="2.0.0 Ok: queued as 4Xyz12AbC",
    )
    refused = to_result(reply(Stage.RCPT, 550, "5.1.1 no such user queued as X1", "5.1.1"))
    assert (refused.decision, refused.reason, refused.provider_id) == (
        Decision.FAILED, "recipient_rejected", None)  # never an id from a refusal
    lost = to_result(broken(Stage.BODY, Failure.TIMEOUT))
    assert (lost.decision, lost.stage, lost.code, lost.detail) == (
        Decision.UNKNOWN, "body", None, "test")


PROVIDER_IDS = [
    ("postfix", "2.0.0 Ok: queued as 4Xyz12AbC", "4Xyz12AbC"),
    ("postfix no enhanced", "Ok: queued as 3F2B41C0A1", "3F2B41C0A1"),
    ("sendgrid", "Ok: queued as wk0Bx2QqRr-9PqPVbc9U5A", "wk0Bx2QqRr-9PqPVbc9U5A"),
    ("queued as plain", "queued as ABC123", "ABC123"),
    ("queued as, sentence", "Message queued as ABC123.", "ABC123"),
    (
        "ses",
        "Ok 0100018c1f2e3d4c-5b6a7980-1a2b-3c4d-5e6f-7a8b9c0d1e2f-000000",
        "0100018c1f2e3d4c-5b6a7980-1a2b-3c4d-5e6f-7a8b9c0d1e2f-000000",
    ),
    ("ses with enhanced", "2.0.0 Ok 0100018c1f2e3d4c-000000", "0100018c1f2e3d4c-000000"),
    ("bare brackets", "2.0.0 <20240101.abc@mx.example.com>", "20240101.abc@mx.example.com"),
    (
        "exchange",
        "2.6.0 <a1b2@EX01.corp.example> [InternalId=123, Hostname=EX01] Queued mail for delivery",
        "a1b2@EX01.corp.example",
    ),
    (
        "gmail",
        "2.0.0 OK  1700000000 d9443c01a7336-1d05a1e7c3bsi.123 - gsmtp",
        "d9443c01a7336-1d05a1e7c3bsi.123",
    ),
    ("exim", "OK id=1rABCD-000123-Ab", "1rABCD-000123-Ab"),
    ("sendmail", "2.0.0 4ABCdef012345 Message accepted for delivery", "4ABCdef012345"),
    ("plain ok", "2.0.0 Ok", None),
    ("ok thanks", "Ok thanks", None),
    ("short word after ok", "OK 12", None),
    ("garbage", "Great success", None),
    ("empty", "", None),
    ("too long", "queued as " + "A" * 300, None),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in PROVIDER_IDS], ids=[c[0] for c in PROVIDER_IDS]
)
def test_parse_provider_id(text: str, expected: str | None) -> None:
    assert parse_provider_id(text) == expected


@given(st.text(max_size=300))
def test_parse_provider_id_never_raises(text: str) -> None:
    result = parse_provider_id(text)
    assert result is None or (0 < len(result) <= 255)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5.1.1 No such user", "5.1.1"),
        ("550 5.1.1 No such user", "5.1.1"),
        ("550-5.7.1 policy", "5.7.1"),
        ("4.2.2 Mailbox full", "4.2.2"),
        ("  2.0.0 Ok", "2.0.0"),
        ("5.7.11 Encryption required", "5.7.11"),
        ("No such user", None),
        ("1.2.3 wrong class", None),
        ("5.1.1.2 not a code", None),
        ("5.1", None),
        ("", None),
    ],
)
def test_parse_enhanced_code(text: str, expected: str | None) -> None:
    assert parse_enhanced_code(text) == expected
