"""The SMTP transport's pool slots (mailout.transports.smtp.pool) and the protocol
that keeps pipelined replies (_aiosmtplib_compat.RepliesKept)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiosmtplib.protocol import SMTPProtocol

from mailout.message.envelope import Envelope
from mailout.models import Mailbox
from mailout.transports.smtp._aiosmtplib_compat import RepliesKept
from mailout.transports.smtp.pool import Handover, Slots


def envelope(n: int) -> Envelope:
    return Envelope(message_id=f"<{n}@x>", idempotency_key=str(n), sender=Mailbox("s@x.example"),
                    to=(Mailbox(f"r{n}@x.example"),), subject="s", text="t", html=None)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_free_slot_is_taken_at_once_and_the_rest_wait_in_order() -> None:
    slots = Slots(1)
    assert await slots.acquire(envelope(0)) is None
    second = asyncio.create_task(slots.acquire(envelope(1)))
    third = asyncio.create_task(slots.acquire(envelope(2)))
    await settle()
    assert not second.done()
    assert not third.done()
    slots.release()
    await settle()
    assert second.done()
    assert second.result() is None
    assert not third.done()
    slots.release()
    await settle()
    assert third.done()
    assert third.result() is None


async def test_the_first_waiting_send_is_taken_along_and_handed_the_connection() -> None:
    slots = Slots(2)
    assert await slots.acquire(envelope(0)) is None
    assert await slots.acquire(envelope(1)) is None  # a free slot is never held back
    rider = asyncio.create_task(slots.acquire(envelope(2)))
    later = asyncio.create_task(slots.acquire(envelope(3)))
    await settle()
    waiter = slots.first_waiting()
    assert waiter is not None
    assert waiter.envelope == envelope(2)
    slots.take_along(waiter)
    follower = slots.first_waiting()
    assert follower is not None
    assert follower.envelope == envelope(3)
    handover = Handover(smtp=None, replies=())  # type: ignore[arg-type]  # (no connection needed)
    assert slots.hand_over(waiter, handover)
    assert await rider is handover
    assert not later.done()  # still waiting for a slot of its own
    slots.release()
    assert await later is None


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    slots = Slots(1)
    assert await slots.acquire(envelope(0)) is None
    gone = asyncio.create_task(slots.acquire(envelope(1)))
    stays = asyncio.create_task(slots.acquire(envelope(2)))
    await settle()
    gone.cancel()
    await settle()
    waiter = slots.first_waiting()
    assert waiter is not None
    assert waiter.envelope == envelope(2)
    slots.release()
    assert await stays is None


async def test_handing_over_to_a_send_cancelled_meanwhile_fails() -> None:
    slots = Slots(1)
    assert await slots.acquire(envelope(0)) is None
    rider = asyncio.create_task(slots.acquire(envelope(1)))
    await settle()
    waiter = slots.first_waiting()
    assert waiter is not None
    slots.take_along(waiter)
    rider.cancel()
    await settle()
    assert not slots.hand_over(waiter, None)  # the caller keeps the slot
    slots.release()
    assert await slots.acquire(envelope(2)) is None  # and it came back to the pool


async def test_a_slot_handed_just_before_cancellation_is_passed_on() -> None:
    slots = Slots(1)
    assert await slots.acquire(envelope(0)) is None
    first = asyncio.create_task(slots.acquire(envelope(1)))
    second = asyncio.create_task(slots.acquire(envelope(2)))
    await settle()
    slots.release()  # the slot goes to the first waiter...
    first.cancel()  # ...cancelled before it could run
    await settle()
    assert first.cancelled()
    assert second.done()
    assert second.result() is None


@pytest.fixture
async def connected() -> AsyncIterator[tuple[socket.socket, asyncio.AbstractEventLoop]]:
    ours, theirs = socket.socketpair()
    yield ours, asyncio.get_running_loop()
    theirs.close()


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "aiosmtplib-alone"])
async def test_a_reply_arriving_before_the_previous_one_is_picked_up(
    connected: tuple[socket.socket, asyncio.AbstractEventLoop], kept: bool,
) -> None:
    sock, loop = connected
    protocol = SMTPProtocol(loop=loop)
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
    receiver: asyncio.Protocol = RepliesKept(protocol) if kept else protocol
    try:
        protocol._response_pending = True  # a pipelined group was written
        receiver.data_received(b"250 2.1.0 MAIL ok\r\n")  # parsed: awaits pickup
        receiver.data_received(b"250 2.1.5 RCPT ok\r\n")  # before the reader's turn
        first = await protocol.read_response()
        assert first.message == "2.1.0 MAIL ok"
        protocol._response_pending = True
        second = protocol._read_response_from_buffer()
        # aiosmtplib's own protocol drops it: the read would wait out the deadline.
        assert (second is not None and second.message == "2.1.5 RCPT ok") is kept
    finally:
        transport.close()
