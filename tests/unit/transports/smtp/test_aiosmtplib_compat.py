"""The aiosmtplib internals mailout.transports.smtp._aiosmtplib_compat relies on: the
installed version is in the supported range, and each private name is still there with
the shape and behaviour the module uses. A newer aiosmtplib that changed one fails
here, by name, rather than as a lost reply or a send that waits out its deadline."""

from __future__ import annotations

import asyncio
import inspect
from importlib.metadata import version

import pytest
from aiosmtplib import SMTPResponse, protocol
from aiosmtplib.protocol import SMTPProtocol

from mailout.transports.smtp import _aiosmtplib_compat as compat
from tests.support.pins import installed, pinned_range, shown

LOWEST, FIRST_UNSUPPORTED = compat.SUPPORTED


def changed(what: str) -> str:
    return (f"aiosmtplib {version('aiosmtplib')} changed {what}, which "
            "mailout/transports/smtp/_aiosmtplib_compat.py relies on (supported: "
            f">={shown(LOWEST)},<{shown(FIRST_UNSUPPORTED)}); adapt that module, "
            "then move SUPPORTED and the bound in pyproject.toml")


def test_the_installed_aiosmtplib_is_in_the_supported_range() -> None:
    assert LOWEST <= installed("aiosmtplib") < FIRST_UNSUPPORTED, changed("its version")


def test_pyproject_pins_the_supported_range() -> None:
    # What users install against is the range the compat module was checked on.
    assert pinned_range("aiosmtplib") == compat.SUPPORTED


@pytest.mark.parametrize("name", ["_read_response_from_buffer", "_drain_helper",
                                  "data_received", "eof_received", "connection_lost",
                                  "pause_writing", "resume_writing"])
def test_protocol_methods_exist(name: str) -> None:
    assert callable(getattr(SMTPProtocol, name, None)), changed(f"SMTPProtocol.{name}")


def test_method_shapes() -> None:
    assert list(inspect.signature(SMTPProtocol._read_response_from_buffer).parameters) == \
        ["self"], changed("SMTPProtocol._read_response_from_buffer()'s parameters")
    assert inspect.iscoroutinefunction(SMTPProtocol._drain_helper), \
        changed("SMTPProtocol._drain_helper (no longer a coroutine function)")
    assert list(inspect.signature(SMTPProtocol._drain_helper).parameters) == ["self"], \
        changed("SMTPProtocol._drain_helper()'s parameters")
    assert isinstance(protocol.MAX_RESPONSE_LENGTH, int), \
        changed("aiosmtplib.protocol.MAX_RESPONSE_LENGTH")


async def test_instance_attributes() -> None:
    proto = SMTPProtocol()
    assert isinstance(getattr(proto, "_buffer", None), bytearray), \
        changed("SMTPProtocol._buffer (a bytearray of data not yet parsed)")
    assert getattr(proto, "_response_pending", None) is False, \
        changed("SMTPProtocol._response_pending (False until a reply is due)")
    assert hasattr(proto, "_response_waiter"), changed("SMTPProtocol._response_waiter")


async def test_replies_are_parsed_one_per_read_and_the_rest_kept() -> None:
    # What next_reply builds on: two pipelined replies arrived at once; the first
    # read takes one, the second is already there, then there is nothing.
    proto = SMTPProtocol()
    proto._buffer.extend(b"250 2.1.0 ok\r\n250-2.1.5\r\n250 ok too\r\n")
    assert compat.buffered_reply(proto) == SMTPResponse(250, "2.1.0 ok"), \
        changed("SMTPProtocol._read_response_from_buffer() (one reply per call)")
    assert proto._response_pending is True
    assert compat.unread(proto) > 0, changed("SMTPProtocol._buffer (the rest kept)")
    assert compat.buffered_reply(proto) == SMTPResponse(250, "2.1.5\nok too"), \
        changed("SMTPProtocol._read_response_from_buffer() (multiline replies)")
    assert compat.buffered_reply(proto) is None
    assert compat.unread(proto) == 0


class _Transport(asyncio.Transport):
    """Just enough of a transport for connection_made (no socket is needed to see
    what the protocol does with bytes handed to it)."""

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def is_closing(self) -> bool:
        return False


async def test_data_is_dropped_unless_a_reply_is_due() -> None:
    # Why mark_reply_due exists: without it a reply to a command written by hand is lost.
    proto = SMTPProtocol()
    proto.connection_made(_Transport())
    greeting = await _reply_to(proto, b"220 hello\r\n")
    assert greeting.code == 220
    proto.data_received(b"250 unasked\r\n")
    assert compat.unread(proto) == 0, changed("data_received (unasked data is kept)")
    compat.mark_reply_due(proto)
    assert (await _reply_to(proto, b"250 asked\r\n")).message == "asked", \
        changed("_response_pending (setting it no longer makes a reply due)")


async def test_a_reply_arriving_while_one_awaits_pickup_is_kept_by_the_wrapper() -> None:
    proto = SMTPProtocol()
    proto.connection_made(_Transport())
    wrapped = compat.RepliesKept(proto)
    await _reply_to(proto, b"220 hello\r\n")
    compat.mark_reply_due(proto)
    wrapped.data_received(b"250 mail\r\n")
    waiter = proto._response_waiter
    assert waiter is not None, changed("_response_waiter")
    assert waiter.done(), changed("_response_waiter (its result set when a reply is parsed)")
    wrapped.data_received(b"250 rcpt\r\n")  # before the reader's turn: kept
    assert (await proto.read_response()).message == "mail"
    reply = compat.buffered_reply(proto)
    assert reply is not None
    assert reply.message == "rcpt"


async def test_drain_returns_at_once_when_writing_is_not_paused() -> None:
    proto = SMTPProtocol()
    await asyncio.wait_for(compat.drain(proto), 1)
    proto.pause_writing()
    waiting = asyncio.ensure_future(compat.drain(proto))
    await asyncio.sleep(0)
    assert not waiting.done(), changed("_drain_helper (no longer waits while paused)")
    proto.resume_writing()
    await asyncio.wait_for(waiting, 1)


async def _reply_to(proto: SMTPProtocol, data: bytes) -> SMTPResponse:
    proto.data_received(data)
    return await asyncio.wait_for(proto.read_response(), 1)
