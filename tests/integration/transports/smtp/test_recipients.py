"""SmtpTransport with several recipients: partial acceptance over real SMTP.

Every test runs against a server with and without PIPELINING. When the server
accepts some RCPT TO and refuses others, the message goes to the accepted ones and
each refusal is reported for its recipient, with its own decision.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from email.utils import make_msgid

import pytest
from bench.support.smtpserver import SmtpTestServer

from mailout.message.envelope import Envelope
from mailout.transports.base import Decision, RecipientResult
from mailout.transports.smtp.client import SmtpTransport
from tests.support.fixtures import raw_envelope, smtp_settings_for

SENDER = "sender@mailout.test"


def envelope(*rcpts: str) -> Envelope:
    message_id = make_msgid(domain="mailout.test")
    data = (f"From: {SENDER}\r\nTo: {', '.join(rcpts)}\r\nSubject: hi\r\n"
            f"Message-ID: {message_id}\r\n\r\nHello.\r\n").encode()
    return raw_envelope(SENDER, rcpts, data, message_id)


@pytest.fixture(params=[True, False], ids=["pipelined", "one-by-one"])
def server(request: pytest.FixtureRequest) -> Iterator[SmtpTestServer]:
    with SmtpTestServer(pipelining=request.param) as srv:
        yield srv


@pytest.fixture
async def transport(server: SmtpTestServer) -> AsyncIterator[SmtpTransport]:
    smtp = SmtpTransport(smtp_settings_for(server))
    yield smtp
    await smtp.close()


def by_address(results: tuple[RecipientResult, ...]) -> dict[str, tuple[Decision, int | None,
                                                                        str | None]]:
    return {r.address: (r.decision, r.code, r.enhanced) for r in results}


async def test_accepted_recipients_get_the_message_and_refusals_are_reported(
    server: SmtpTestServer, transport: SmtpTransport
):
    ok, gone, busy = "ok@example.com", "rcpt-550@example.com", "rcpt-451@example.com"
    result = await transport.send(envelope(ok, gone, busy))

    assert result.decision is Decision.SENT
    assert result.provider_id == "msg-1"
    assert by_address(result.recipients) == {
        ok: (Decision.SENT, 250, "2.1.5"),
        gone: (Decision.FAILED, 550, "5.1.1"),
        busy: (Decision.RETRY, 451, "4.3.0"),
    }
    [received] = server.messages
    assert received.rcpt_tos == (ok,)
    # The connection is clean afterwards: the next message reuses it.
    assert (await transport.send(envelope("next@example.com"))).decision is Decision.SENT
    assert server.connections == 1


async def test_everyone_refused_is_decided_by_the_weightiest_refusal(
    server: SmtpTestServer, transport: SmtpTransport
):
    gone, busy = "rcpt-550@example.com", "rcpt-451@example.com"
    result = await transport.send(envelope(gone, busy))

    # Someone may still get it: retry, and say which recipient failed for good.
    assert (result.decision, result.stage, result.code) == (Decision.RETRY, "rcpt", 451)
    assert by_address(result.recipients) == {gone: (Decision.FAILED, 550, "5.1.1"),
                                             busy: (Decision.RETRY, 451, "4.3.0")}
    assert server.messages == []
    assert (await transport.send(envelope("next@example.com"))).decision is Decision.SENT


async def test_everyone_refused_for_good_fails(server: SmtpTestServer, transport: SmtpTransport):
    result = await transport.send(envelope("a.rcpt-550@example.com", "b.rcpt-553@example.com"))
    assert (result.decision, result.reason, result.code) == (Decision.FAILED,
                                                             "recipient_rejected", 550)
    assert {r.decision for r in result.recipients} == {Decision.FAILED}


async def test_a_data_refusal_after_accepted_recipients_keeps_the_permanent_refusals(
    server: SmtpTestServer, transport: SmtpTransport
):
    ok, gone = "ok.data-451@example.com", "rcpt-550@example.com"
    result = await transport.send(envelope(ok, gone))

    assert (result.decision, result.stage, result.code) == (Decision.RETRY, "data", 451)
    # The accepted recipient shares the message's retry; the 550 is settled for good.
    assert by_address(result.recipients) == {gone: (Decision.FAILED, 550, "5.1.1")}
    assert server.messages == []


async def test_one_recipient_reports_no_per_recipient_results(transport: SmtpTransport):
    result = await transport.send(envelope("rcpt-550@example.com"))
    assert (result.decision, result.recipients) == (Decision.FAILED, ())


async def test_only_deliver_to_recipients_get_a_retry(
    server: SmtpTestServer, transport: SmtpTransport
):
    first = envelope("ok@example.com", "later@example.com")
    retry = raw_envelope(SENDER, ("ok@example.com", "later@example.com"), first.wire,
                         first.message_id)
    retry = Envelope(**{**{f: getattr(retry, f) for f in retry.__dataclass_fields__},
                        "deliver_to": ("later@example.com",)})
    assert (await transport.send(retry)).decision is Decision.SENT
    [received] = server.messages
    assert received.rcpt_tos == ("later@example.com",)
    assert b"To: ok@example.com, later@example.com" in received.data
