"""Sends taken along: a waiting send's MAIL, RCPT and DATA written behind another's
content on the same connection (mailout.transports.smtp.pool), against a real SMTP
server over TCP, and what happens to the send taken along when the first one fails."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from email.utils import make_msgid

import pytest
from bench.support.smtpserver import SmtpTestServer

from mailout.message.envelope import Envelope
from mailout.transports.smtp import codes as smtpcodes
from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.outcome import Failure, SendOutcome, Stage
from tests.support.fixtures import raw_envelope, smtp_settings_for

SENDER = "sender@mailout.test"


def envelope(rcpt: str, sender: str = SENDER) -> Envelope:
    message_id = make_msgid(domain="mailout.test")
    data = (f"From: {sender}\r\nTo: {rcpt}\r\nSubject: hi\r\nMessage-ID: {message_id}\r\n\r\n"
            "Hello.\r\n.a line starting with a dot\r\n").encode()
    return raw_envelope(sender, rcpt, data, message_id)


@pytest.fixture(params=[True, False], ids=["pipelining", "no-pipelining"])
def server(request: pytest.FixtureRequest) -> Iterator[SmtpTestServer]:
    with SmtpTestServer(pipelining=request.param) as smtp_server:
        yield smtp_server


@pytest.fixture
def pipelining_server() -> Iterator[SmtpTestServer]:
    with SmtpTestServer() as smtp_server:
        yield smtp_server


def recipients(server: SmtpTestServer) -> list[str]:
    return [m.rcpt_tos[0] for m in server.messages]


async def test_waiting_sends_go_out_behind_the_content(server: SmtpTestServer) -> None:
    transport = SmtpTransport(smtp_settings_for(server, pool_size=1))
    try:
        outcomes = await asyncio.gather(
            *(transport.exchange(envelope(f"r{i}@example.com")) for i in range(4)))
    finally:
        await transport.close()
    assert all(o.accepted for o in outcomes), outcomes
    assert recipients(server) == [f"r{i}@example.com" for i in range(4)]
    assert server.connections == 1
    # Each send after the first rode behind the content before it, where offered.
    assert server.mail_behind_data == (3 if server.pipelining else 0)


async def test_a_free_slot_is_never_held_back_for_company(
    pipelining_server: SmtpTestServer,
) -> None:
    transport = SmtpTransport(smtp_settings_for(pipelining_server, pool_size=8))
    try:
        assert (await transport.exchange(envelope("warm@example.com"))).accepted
        # A slot is free for the second: it takes a connection of its own rather than
        # wait to ride behind the first's content.
        first, second = await asyncio.gather(transport.exchange(envelope("a@example.com")),
                                             transport.exchange(envelope("b@example.com")))
    finally:
        await transport.close()
    assert first.accepted
    assert second.accepted
    assert pipelining_server.connections == 2
    assert pipelining_server.mail_behind_data == 0


async def two_sends(server: SmtpTestServer, first: Envelope, second: Envelope,
                    **settings: object) -> tuple[SendOutcome, SendOutcome, SmtpTransport]:
    transport = SmtpTransport(smtp_settings_for(server, pool_size=1, **settings))
    one, two = await asyncio.gather(transport.exchange(first), transport.exchange(second))
    return one, two, transport


async def test_a_421_final_reply_sends_the_one_taken_along_on_a_new_connection(
    pipelining_server: SmtpTestServer,
) -> None:
    one, two, transport = await two_sends(pipelining_server, envelope("body-421@example.com"),
                                          envelope("b@example.com"))
    await transport.close()
    assert (one.stage, one.failure) == (Stage.BODY, Failure.REPLY)
    assert one.reply is not None
    assert one.reply.code == smtpcodes.SERVICE_NOT_AVAILABLE
    assert two.accepted, two
    assert recipients(pipelining_server) == ["b@example.com"]  # once
    assert pipelining_server.connections == 2
    assert pipelining_server.mail_behind_data == 1  # b had gone out behind the content


async def test_a_lost_final_reply_leaves_the_one_taken_along_safe_to_send(
    pipelining_server: SmtpTestServer,
) -> None:
    pipelining_server.fail("slow@example.com", Stage.BODY, delay=2.0)
    one, two, transport = await two_sends(pipelining_server, envelope("slow@example.com"),
                                          envelope("b@example.com"), timeout=1.0)
    await transport.close()
    assert (one.stage, one.failure) == (Stage.BODY, Failure.TIMEOUT)  # outcome unknown
    assert two.accepted, two  # only its envelope had left: sent again, elsewhere
    assert recipients(pipelining_server).count("b@example.com") == 1
    assert pipelining_server.connections == 2
    assert pipelining_server.mail_behind_data == 1


async def test_a_refused_final_reply_keeps_the_connection_for_the_next(
    pipelining_server: SmtpTestServer,
) -> None:
    one, two, transport = await two_sends(pipelining_server, envelope("body-554@example.com"),
                                          envelope("b@example.com"))
    await transport.close()
    assert (one.stage, one.failure) == (Stage.BODY, Failure.REPLY)
    assert two.accepted, two
    assert pipelining_server.connections == 1
    assert pipelining_server.mail_behind_data == 1


async def test_the_one_taken_along_is_refused_on_its_own(
    pipelining_server: SmtpTestServer,
) -> None:
    one, two, transport = await two_sends(pipelining_server, envelope("a@example.com"),
                                          envelope("rcpt-550@example.com"))
    try:
        assert one.accepted
        assert (two.stage, two.failure) == (Stage.RCPT, Failure.REPLY)
        assert two.reply is not None
        assert two.reply.code == smtpcodes.MAILBOX_UNAVAILABLE
        assert (await transport.exchange(envelope("c@example.com"))).accepted
    finally:
        await transport.close()
    assert recipients(pipelining_server) == ["a@example.com", "c@example.com"]
    assert pipelining_server.connections == 1
    assert pipelining_server.mail_behind_data == 1  # the refused one went behind a


async def test_replies_of_the_one_taken_along_may_come_late(
    pipelining_server: SmtpTestServer,
) -> None:
    pipelining_server.fail("late@mailout.test", Stage.MAIL, delay=0.3)
    one, two, transport = await two_sends(pipelining_server, envelope("a@example.com"),
                                          envelope("b@example.com", sender="late@mailout.test"))
    await transport.close()
    assert one.accepted
    assert two.accepted
    assert pipelining_server.connections == 1
    assert pipelining_server.mail_behind_data == 1


async def test_a_send_cancelled_after_being_taken_along(
    pipelining_server: SmtpTestServer,
) -> None:
    pipelining_server.fail("slow@example.com", Stage.BODY, delay=0.5)
    transport = SmtpTransport(smtp_settings_for(pipelining_server, pool_size=1))
    try:
        first = asyncio.create_task(transport.exchange(envelope("slow@example.com")))
        second = asyncio.create_task(transport.exchange(envelope("b@example.com")))
        await asyncio.to_thread(pipelining_server.wait_for_messages, 1)
        assert pipelining_server.mail_behind_data == 1  # b's envelope is out
        second.cancel()
        assert (await first).accepted
        with pytest.raises(asyncio.CancelledError):
            await second
        # Its transaction was left open on that connection: the connection went.
        assert (await transport.exchange(envelope("c@example.com"))).accepted
    finally:
        await transport.close()
    assert recipients(pipelining_server) == ["slow@example.com", "c@example.com"]
    assert pipelining_server.connections == 2


async def test_a_send_with_a_bad_address_is_not_taken_along(
    pipelining_server: SmtpTestServer,
) -> None:
    transport = SmtpTransport(smtp_settings_for(pipelining_server, pool_size=1))
    try:
        one, two = await asyncio.gather(
            transport.exchange(envelope("a@example.com")),
            transport.exchange(envelope("b\r\nRCPT TO:<x@example.com>@example.com")),
            return_exceptions=True)
    finally:
        await transport.close()
    assert isinstance(one, SendOutcome)
    assert one.accepted
    assert isinstance(two, ValueError)  # raised in its own send, before anything is written
    assert pipelining_server.mail_behind_data == 0
    assert recipients(pipelining_server) == ["a@example.com"]
