"""SmtpTransport against a real SMTP server over TCP (bench.support.smtpserver)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from email.utils import make_msgid

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.tls import TestCerts

from mailout.message.envelope import Envelope
from mailout.transports.smtp import codes as smtpcodes
from mailout.transports.smtp.client import SmtpTransport, check_connection
from mailout.transports.smtp.outcome import Failure, Reply, SendOutcome, Stage, parse_reply
from mailout.transports.smtp.settings import SmtpSettings, TlsMode, default_tls_mode
from tests.support.fixtures import AUTH_PASSWORD, AUTH_USER, raw_envelope, smtp_settings_for

SENDER = "sender@mailout.test"


def envelope(rcpt: str = "alice@example.com", sender: str = SENDER) -> Envelope:
    message_id = make_msgid(domain="mailout.test")
    data = (
        f"From: {sender}\r\nTo: {rcpt}\r\nSubject: hello\r\nMessage-ID: {message_id}\r\n"
        "Idempotency-Key: key-1\r\n\r\nHello.\r\n.a line starting with a dot\r\n.\r\nbye\r\n"
    ).encode()
    return raw_envelope(sender, rcpt, data, message_id)


@pytest.fixture(params=[True, False], ids=["pipelined", "one-by-one"])
def smtp_server(request: pytest.FixtureRequest) -> Iterator[SmtpTestServer]:
    """Every test here runs against a server with and without PIPELINING: the
    outcomes and their stages must not depend on it."""
    with SmtpTestServer(pipelining=request.param) as server:
        yield server


@pytest.fixture
async def transport(smtp_server: SmtpTestServer) -> AsyncIterator[SmtpTransport]:
    smtp = SmtpTransport(smtp_settings_for(smtp_server))
    yield smtp
    await smtp.close()


def assert_failed(outcome: SendOutcome, stage: Stage, failure: Failure) -> None:
    assert (outcome.stage, outcome.failure) == (stage, failure), outcome
    assert not outcome.accepted


def assert_reply(outcome: SendOutcome, stage: Stage, code: int, enhanced: str | None) -> None:
    assert_failed(outcome, stage, Failure.REPLY)
    assert outcome.reply is not None
    assert (outcome.reply.code, outcome.reply.enhanced) == (code, enhanced), outcome


# -- delivery and pooling -------------------------------------------------------


async def test_delivers_message_intact(smtp_server: SmtpTestServer, transport: SmtpTransport):
    sent = envelope()
    outcome = await transport.exchange(sent)

    assert outcome.accepted
    assert outcome.stage is Stage.BODY
    assert outcome.reply is not None
    assert outcome.reply.code == smtpcodes.OK
    assert outcome.reply.enhanced == "2.0.0"
    [received] = smtp_server.messages
    assert received.message_id == sent.message_id
    assert received.idempotency_key == "key-1"
    assert (received.mail_from, received.rcpt_tos) == (SENDER, ("alice@example.com",))
    assert received.data == sent.wire  # dot-stuffing undone by the server, bytes equal


async def test_reuses_one_connection_for_sequential_sends(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    outcomes = [await transport.exchange(envelope(f"user{i}@example.com")) for i in range(5)]

    assert all(o.accepted for o in outcomes)
    assert len(smtp_server.messages) == 5
    assert smtp_server.connections == 1


async def test_concurrent_sends_share_a_bounded_pool(smtp_server: SmtpTestServer):
    transport = SmtpTransport(smtp_settings_for(smtp_server, pool_size=2))
    try:
        outcomes = await asyncio.gather(
            *(transport.exchange(envelope(f"user{i}@example.com")) for i in range(8))
        )
    finally:
        await transport.close()

    assert all(o.accepted for o in outcomes)
    assert len({m.message_id for m in smtp_server.messages}) == 8
    assert 1 <= smtp_server.connections <= 2


async def test_close_is_idempotent_and_later_sends_still_work(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    assert (await transport.exchange(envelope())).accepted
    await transport.close()
    await transport.close()
    assert (await transport.exchange(envelope())).accepted


# -- connect failures -----------------------------------------------------------


async def test_connection_refused_then_recovers(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    assert (await transport.exchange(envelope())).accepted
    smtp_server.stop_listening()

    outcome = await transport.exchange(envelope())
    assert_failed(outcome, Stage.CONNECT, Failure.REFUSED)
    assert outcome.reply is None
    assert outcome.detail

    smtp_server.start_listening()
    assert (await transport.exchange(envelope())).accepted
    assert len(smtp_server.messages) == 2


async def test_unknown_host_is_a_dns_failure():
    settings = SmtpSettings("no-such-host.invalid", 25, tls=TlsMode.NONE, timeout=3.0)
    outcome = await SmtpTransport(settings).exchange(envelope())
    assert_failed(outcome, Stage.CONNECT, Failure.DNS)


async def test_silent_server_times_out_at_connect():
    with socket.socket() as listener:  # accepts TCP (backlog) but never greets
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        host, port = listener.getsockname()
        settings = SmtpSettings(host, port, tls=TlsMode.NONE, timeout=0.3)
        outcome = await SmtpTransport(settings).exchange(envelope())
    assert_failed(outcome, Stage.CONNECT, Failure.TIMEOUT)


async def test_421_greeting_is_a_connect_reply_and_pool_recovers(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    smtp_server.greeting = "421 4.3.2 Too busy, try later"
    outcome = await transport.exchange(envelope())
    assert_reply(outcome, Stage.CONNECT, smtpcodes.SERVICE_NOT_AVAILABLE, "4.3.2")

    smtp_server.greeting = None
    assert (await transport.exchange(envelope())).accepted
    assert len(smtp_server.messages) == 1


# -- replies at each stage ------------------------------------------------------


async def test_451_at_mail_then_connection_is_reset_and_reused(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    outcome = await transport.exchange(envelope(sender="mail-451@mailout.test"))
    assert_reply(outcome, Stage.MAIL, smtpcodes.LOCAL_ERROR, "4.3.0")

    assert (await transport.exchange(envelope())).accepted
    assert smtp_server.connections == 1  # RSET, not a new connection
    assert len(smtp_server.messages) == 1


@pytest.mark.parametrize(
    ("rcpt", "sender", "stage"),
    [
        # Pipelined, RCPT and DATA were already sent when MAIL got its 421: their
        # replies never come, and the outcome is still the MAIL reply.
        ("alice@example.com", "mail-421@mailout.test", Stage.MAIL),
        ("rcpt-421@example.com", SENDER, Stage.RCPT),
    ],
)
async def test_421_discards_the_connection(
    smtp_server: SmtpTestServer, transport: SmtpTransport, rcpt: str, sender: str,
    stage: Stage,
):
    outcome = await transport.exchange(envelope(rcpt, sender=sender))
    assert_reply(outcome, stage, smtpcodes.SERVICE_NOT_AVAILABLE, "4.3.2")

    assert (await transport.exchange(envelope())).accepted
    assert smtp_server.connections == 2


async def test_commands_are_pipelined_only_when_offered(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    for i in range(3):
        assert (await transport.exchange(envelope(f"p{i}@example.com"))).accepted
    assert smtp_server.pipelined == (3 if smtp_server.pipelining else 0)
    assert len(smtp_server.messages) == 3


async def test_replies_arriving_apart_are_read_in_order(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    # The MAIL reply comes alone; the RCPT and DATA replies 0.3 s later, together or
    # apart: each must be matched to its command, none lost in aiosmtplib's buffer.
    smtp_server.fail("slow@example.com", Stage.RCPT, delay=0.3)
    smtp_server.fail("slow-refused@example.com", Stage.RCPT, 450, delay=0.3)
    assert (await transport.exchange(envelope("slow@example.com"))).accepted
    refused = await transport.exchange(envelope("slow-refused@example.com"))
    assert_reply(refused, Stage.RCPT, smtpcodes.MAILBOX_BUSY, "4.2.1")
    assert (await transport.exchange(envelope("after@example.com"))).accepted
    assert [m.rcpt_tos for m in smtp_server.messages] == [("slow@example.com",),
                                                          ("after@example.com",)]
    assert smtp_server.connections == 1


async def test_pipelining_can_be_switched_off(smtp_server: SmtpTestServer):
    smtp = SmtpTransport(smtp_settings_for(smtp_server, pipelining=False))
    try:
        for i in range(2):
            assert (await smtp.exchange(envelope(f"p{i}@example.com"))).accepted
    finally:
        await smtp.close()
    assert smtp_server.pipelined == 0
    assert len(smtp_server.messages) == 2


async def test_data_accepted_after_refused_recipient_gets_a_lone_dot(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    smtp_server.data_without_rcpt = True
    outcome = await transport.exchange(envelope("rcpt-550@example.com"))
    assert_reply(outcome, Stage.RCPT, smtpcodes.MAILBOX_UNAVAILABLE, "5.1.1")
    # Only a pipelining client has sent DATA by then; it must end it with no content.
    assert smtp_server.empty_data == (1 if smtp_server.pipelining else 0)
    assert smtp_server.messages == []
    assert (await transport.exchange(envelope())).accepted
    assert smtp_server.connections == 1


async def test_550_at_rcpt_has_enhanced_code(smtp_server: SmtpTestServer, transport: SmtpTransport):
    outcome = await transport.exchange(envelope("rcpt-550@example.com"))
    assert_reply(outcome, Stage.RCPT, smtpcodes.MAILBOX_UNAVAILABLE, "5.1.1")
    assert smtp_server.messages == []


async def test_554_to_data_command(smtp_server: SmtpTestServer, transport: SmtpTransport):
    outcome = await transport.exchange(envelope("data-554@example.com"))
    assert_reply(outcome, Stage.DATA, smtpcodes.TRANSACTION_FAILED, "5.6.0")
    assert smtp_server.messages == []


async def test_552_after_body(smtp_server: SmtpTestServer, transport: SmtpTransport):
    outcome = await transport.exchange(envelope("body-552@example.com"))
    assert_reply(outcome, Stage.BODY, smtpcodes.EXCEEDED_STORAGE, smtpcodes.MESSAGE_TOO_BIG)
    assert smtp_server.messages == []

    assert (await transport.exchange(envelope())).accepted
    assert smtp_server.connections == 1  # the transaction ended cleanly


async def test_tempfail_once_via_fault_api(smtp_server: SmtpTestServer, transport: SmtpTransport):
    smtp_server.fail("bob@example.com", Stage.RCPT, smtpcodes.LOCAL_ERROR, times=1)

    first = await transport.exchange(envelope("bob@example.com"))
    second = await transport.exchange(envelope("bob@example.com"))

    assert_reply(first, Stage.RCPT, smtpcodes.LOCAL_ERROR, "4.3.0")
    assert second.accepted
    assert [m.rcpt_tos for m in smtp_server.messages] == [("bob@example.com",)]


async def test_tempfail_once_via_token(smtp_server: SmtpTestServer, transport: SmtpTransport):
    rcpt = "carol+body-451-once@example.com"
    first = await transport.exchange(envelope(rcpt))
    second = await transport.exchange(envelope(rcpt))

    assert_reply(first, Stage.BODY, smtpcodes.LOCAL_ERROR, "4.3.0")
    assert second.accepted
    assert len(smtp_server.messages) == 1


# -- drops and timeouts around the final dot ------------------------------------


async def test_drop_before_dot_is_a_retryable_data_stage_failure(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    outcome = await transport.exchange(envelope("drop-before-dot@example.com"))

    # Not BODY: the content was never handed over, so a retry cannot duplicate.
    assert_failed(outcome, Stage.DATA, Failure.DISCONNECT)
    assert smtp_server.messages == []
    assert (await transport.exchange(envelope())).accepted


async def test_drop_after_dot_is_a_body_disconnect(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    sent = envelope("drop-after-dot@example.com")
    outcome = await transport.exchange(sent)

    assert_failed(outcome, Stage.BODY, Failure.DISCONNECT)
    # The unknown-outcome case: the server did take the message.
    assert [m.message_id for m in smtp_server.messages] == [sent.message_id]
    assert (await transport.exchange(envelope())).accepted
    assert smtp_server.connections == 2


async def test_slow_reply_after_dot_times_out_at_body(smtp_server: SmtpTestServer):
    smtp_server.slow_delay = 3.0
    transport = SmtpTransport(smtp_settings_for(smtp_server, timeout=0.5))
    started = time.monotonic()
    try:
        outcome = await transport.exchange(envelope("slow-after-dot@example.com"))
        elapsed = time.monotonic() - started
        assert_failed(outcome, Stage.BODY, Failure.TIMEOUT)
        assert 0.4 < elapsed < 2.0
        assert (await transport.exchange(envelope())).accepted
    finally:
        await transport.close()
    assert smtp_server.connections == 2


# -- TLS and AUTH ---------------------------------------------------------------


async def test_starttls_with_trusted_ca(tls_smtp_server: SmtpTestServer):
    transport = SmtpTransport(smtp_settings_for(tls_smtp_server))
    try:
        assert (await transport.exchange(envelope())).accepted
        assert (await transport.exchange(envelope())).accepted
    finally:
        await transport.close()
    assert [m.tls for m in tls_smtp_server.messages] == [True, True]
    assert tls_smtp_server.connections == 1


async def test_untrusted_certificate_is_a_tls_failure(
    tls_smtp_server: SmtpTestServer, other_certs: TestCerts
):
    for ca_file in (other_certs.ca_file, None):
        settings = smtp_settings_for(tls_smtp_server, ca_file=ca_file)
        outcome = await SmtpTransport(settings).exchange(envelope())
        assert_failed(outcome, Stage.STARTTLS, Failure.TLS)
    assert tls_smtp_server.messages == []


async def test_implicit_tls(test_certs: TestCerts, other_certs: TestCerts):
    context = test_certs.server_context
    with SmtpTestServer(
        tls_context=context, implicit_tls=True, ca_file=test_certs.ca_file
    ) as server:
        trusted = SmtpTransport(smtp_settings_for(server))
        try:
            assert (await trusted.exchange(envelope())).accepted
        finally:
            await trusted.close()
        untrusted = smtp_settings_for(server, ca_file=other_certs.ca_file)
        outcome = await SmtpTransport(untrusted).exchange(envelope())
        assert_failed(outcome, Stage.CONNECT, Failure.TLS)
        assert [m.tls for m in server.messages] == [True]


async def test_starttls_required_but_not_offered(smtp_server: SmtpTestServer):
    settings = smtp_settings_for(smtp_server, tls=TlsMode.STARTTLS)
    outcome = await SmtpTransport(settings).exchange(envelope())
    assert_failed(outcome, Stage.STARTTLS, Failure.TLS)
    assert "STARTTLS" in outcome.detail
    assert smtp_server.messages == []


async def test_authenticated_send(auth_smtp_server: SmtpTestServer):
    transport = SmtpTransport(smtp_settings_for(auth_smtp_server))
    try:
        assert (await transport.exchange(envelope())).accepted
    finally:
        await transport.close()
    assert [m.auth_user for m in auth_smtp_server.messages] == [AUTH_USER]


async def test_bad_password_is_535_at_auth_and_never_leaks(
    auth_smtp_server: SmtpTestServer, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    wrong = "wr0ng-" + AUTH_PASSWORD
    settings = smtp_settings_for(auth_smtp_server, password=wrong)
    transport = SmtpTransport(settings)
    outcome = await transport.exchange(envelope())
    checked = await check_connection(settings)
    await transport.close()

    assert_reply(outcome, Stage.AUTH, smtpcodes.AUTH_CREDENTIALS_INVALID, "5.7.8")
    assert_reply(checked, Stage.AUTH, smtpcodes.AUTH_CREDENTIALS_INVALID, "5.7.8")
    for secret in (wrong, AUTH_PASSWORD):
        for text in (repr(outcome), str(outcome), outcome.detail, repr(checked), caplog.text):
            assert secret not in text
        assert secret not in repr(settings)
        assert secret not in str(settings)
    assert auth_smtp_server.messages == []


async def test_plaintext_auth_when_server_allows_it():
    with SmtpTestServer(auth=(AUTH_USER, AUTH_PASSWORD), auth_require_tls=False) as server:
        transport = SmtpTransport(smtp_settings_for(server))
        try:
            assert (await transport.exchange(envelope())).accepted
        finally:
            await transport.close()
        assert [(m.auth_user, m.tls) for m in server.messages] == [(AUTH_USER, False)]


async def test_auth_required_but_no_credentials_is_a_mail_reply(auth_smtp_server):
    settings = smtp_settings_for(auth_smtp_server, username=None, password=None)
    outcome = await SmtpTransport(settings).exchange(envelope())
    assert_reply(outcome, Stage.MAIL, smtpcodes.AUTH_REQUIRED, "5.7.0")


# -- check_connection -------------------------------------------------------------


async def test_check_connection_reports_last_stage_done(
    smtp_server: SmtpTestServer, auth_smtp_server: SmtpTestServer
):
    plain = await check_connection(smtp_settings_for(smtp_server))
    authed = await check_connection(smtp_settings_for(auth_smtp_server))

    assert plain.accepted
    assert plain.stage is Stage.EHLO
    assert authed.accepted
    assert authed.stage is Stage.AUTH
    assert authed.reply is not None
    assert authed.reply.code == smtpcodes.AUTH_SUCCEEDED
    assert smtp_server.messages == []
    assert auth_smtp_server.messages == []


# -- dedup mode of the test server ---------------------------------------------


async def test_dedup_server_acknowledges_but_does_not_record_a_resend(
    smtp_server: SmtpTestServer, transport: SmtpTransport
):
    smtp_server.dedup = True
    sent = envelope()
    assert (await transport.exchange(sent)).accepted
    assert (await transport.exchange(sent)).accepted
    assert len(smtp_server.messages) == 1
    assert smtp_server.dedup_hits == 1


# -- small pure helpers ---------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text", "enhanced"),
    [
        (550, "5.1.1 <x@example.com>: Recipient address rejected", "5.1.1"),
        (451, "4.7.1 Greylisted, try again", "4.7.1"),
        (250, "2.0.0 Ok: queued as 12345", "2.0.0"),
        (550, "4.1.1 class does not match the reply", None),
        (554, "Transaction failed", None),
        (250, "2.0.0.1 not an enhanced code", None),
    ],
)
def test_parse_reply_enhanced_code(code: int, text: str, enhanced: str | None):
    assert parse_reply(code, text) == Reply(code, text, enhanced)


def test_settings_hide_password_and_default_tls_mode():
    settings = SmtpSettings("smtp.example.com", username="u", password="hunter2-secret")
    assert "hunter2-secret" not in repr(settings)
    assert settings.tls is TlsMode.STARTTLS
    assert default_tls_mode(465) is TlsMode.IMPLICIT
    assert default_tls_mode(587) is TlsMode.STARTTLS
    assert SmtpSettings("h", tls="none").tls is TlsMode.NONE  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pool_size"):
        SmtpSettings("h", pool_size=0)


async def test_the_ehlo_name_set_on_the_url_is_the_one_the_server_sees(
        smtp_server: SmtpTestServer) -> None:
    from mailout.transports import url as transport_url

    url = (f"smtp://{smtp_server.host}:{smtp_server.port}?tls=none"
           "&ehlo=mail.shop.example.com")
    transport = transport_url.parse(url, {}, concurrency=1).build(1)
    try:
        result = await transport.send(envelope())
    finally:
        await transport.close()
    assert result.decision.value == "sent"
    assert smtp_server.ehlo_names == ["mail.shop.example.com"]


async def test_starttls_against_an_implicit_tls_port_other_than_465_pauses_with_the_hint(
        test_certs: TestCerts) -> None:
    # SES documents implicit TLS on 2465 too: the symptom (no greeting, but a TLS
    # handshake answered), not the port number, says the setting is wrong. Before: an
    # outage, probed for ever, with no TLS hint.
    from mailout.transports.base import Decision

    with SmtpTestServer(tls_context=test_certs.server_context, implicit_tls=True,
                        ca_file=test_certs.ca_file) as server:
        settings = smtp_settings_for(server, tls=TlsMode.STARTTLS, timeout=2.0)
        assert settings.port != 465
        transport = SmtpTransport(settings)
        try:
            result = await transport.send(envelope())
            checked = await transport.check()
        finally:
            await transport.close()
    assert (result.decision, result.reason) == (Decision.PAUSE, "tls_mode_mismatch")
    assert "SMTP_TLS" in (result.detail or "")
    assert not checked.ok
    assert "SMTP_TLS=implicit" in checked.line
    assert server.messages == []


async def test_a_silent_plain_server_is_still_an_outage_not_a_tls_mismatch() -> None:
    from mailout.transports.base import Decision

    with socket.socket() as silent:  # accepts, never greets, never speaks TLS
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        settings = SmtpSettings(host="127.0.0.1", port=port, tls=TlsMode.STARTTLS, timeout=1.0)
        transport = SmtpTransport(settings)
        try:
            result = await transport.send(envelope())
        finally:
            await transport.close()
    assert result.decision is Decision.OUTAGE
