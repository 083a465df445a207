"""What the server says right after its 354, before any content is written.

Nothing is due from the server then, so anything that came with or after the 354 (a
close, a 421) means it is not waiting for the content: the send stops at
``Stage.DATA`` having written none of it (safe to retry), not at ``Stage.BODY``, where
a disconnect is an unknown outcome. The transport asks the socket for this
(transaction.server_spoke_after_354); it used to give the event loop two turns to
deliver a close, which sees nothing of a 421 that came in the 354's own segment.

A scripted server over real TCP: each case is sent in one write (a close in the same
segment), so that it arrives together with the 354.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import make_msgid

import pytest

from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.outcome import Failure, Stage
from mailout.transports.smtp.settings import SmtpSettings, TlsMode
from tests.support.fixtures import raw_envelope

CONTENT = b"Subject: hi\r\n\r\nthe content\r\n"


@dataclass
class ScriptedServer:
    """One connection at a time; after DATA it sends ``after_data`` in one write, then
    records whatever the client sends until the client closes."""

    after_data: bytes
    close_after: bool
    pipelining: bool
    received: bytearray = field(default_factory=bytearray)
    listener: socket.socket = field(default_factory=socket.socket)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.sendall(b"220 scripted ESMTP\r\n")
            reader = conn.makefile("rb")
            while line := reader.readline():
                verb = line[:4].upper()
                if verb == b"EHLO":
                    extensions = b"250-PIPELINING\r\n" if self.pipelining else b""
                    conn.sendall(b"250-scripted\r\n" + extensions + b"250 8BITMIME\r\n")
                elif verb in (b"MAIL", b"RCPT"):
                    conn.sendall(b"250 2.0.0 ok\r\n")
                elif verb == b"DATA":
                    if self.close_after:
                        # The 354 and the FIN in one segment: corked, the 354 waits in
                        # the send queue and the shutdown tacks the FIN onto it. Sent
                        # apart, this thread could lose the GIL to the client between
                        # the two and the close would come after the 354, not with it.
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                    conn.sendall(b"354 go ahead\r\n" + self.after_data)
                    if self.close_after:
                        conn.shutdown(socket.SHUT_WR)
                    self.received += reader.read()  # until the client closes
                    break
                elif verb == b"QUIT":
                    conn.sendall(b"221 bye\r\n")
                    break
        self.done.set()


@pytest.fixture(params=[True, False], ids=["pipelined", "one-by-one"])
def pipelining(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def scripted(after_data: bytes, close_after: bool, pipelining: bool) -> Iterator[ScriptedServer]:
    server = ScriptedServer(after_data, close_after, pipelining)
    server.listener.bind(("127.0.0.1", 0))
    server.listener.listen(1)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield server
    server.listener.close()
    thread.join(timeout=10)


async def send_to(server: ScriptedServer) -> tuple[Stage, Failure | None]:
    settings = SmtpSettings(host="127.0.0.1", port=server.port, tls=TlsMode.NONE, timeout=5.0,
                            local_hostname="client.mailout.test")
    transport = SmtpTransport(settings)
    envelope = raw_envelope("s@mailout.test", "r@example.com", CONTENT,
                            make_msgid(domain="mailout.test"))
    try:
        outcome = await transport.exchange(envelope)
    finally:
        await transport.close()
    return outcome.stage, outcome.failure


@pytest.fixture
def closed_with_the_354(pipelining: bool) -> Iterator[ScriptedServer]:
    yield from scripted(b"", close_after=True, pipelining=pipelining)


@pytest.fixture
def a_421_with_the_354(pipelining: bool) -> Iterator[ScriptedServer]:
    yield from scripted(b"421 4.3.2 shutting down\r\n", close_after=False,
                        pipelining=pipelining)


async def test_a_close_that_came_with_the_354_stops_before_the_content(
        closed_with_the_354: ScriptedServer) -> None:
    assert await send_to(closed_with_the_354) == (Stage.DATA, Failure.DISCONNECT)
    assert await asyncio.to_thread(closed_with_the_354.done.wait, 10)  # the loop closes it
    assert closed_with_the_354.received == b""


async def test_a_421_that_came_with_the_354_stops_before_the_content(
        a_421_with_the_354: ScriptedServer) -> None:
    # Before: the content went out and the 421 was read as the reply to it (BODY).
    assert await send_to(a_421_with_the_354) == (Stage.DATA, Failure.DISCONNECT)
    assert await asyncio.to_thread(a_421_with_the_354.done.wait, 10)
    assert a_421_with_the_354.received == b""
