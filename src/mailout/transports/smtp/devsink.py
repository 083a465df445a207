"""A local SMTP sink for development and the demo: accepts mail, writes ``.eml`` files.

An aiosmtpd ``Controller`` on 127.0.0.1 (a free port, or the one given: ``mailout
dev-sink --port``), in its own thread. Every
accepted message is written as ``<directory>/<n>.eml`` (n from 1) exactly as
received, and the reply is ``250 2.0.0 Ok: queued as <ID>``, as Postfix says it,
so the worker records a provider id.

With ``faults=True`` two recipients misbehave, deterministically, by local part
(``name@`` or ``name+tag@``, any domain):

* ``flaky``: ``451 4.3.0`` at RCPT the first time that address is seen, accepted
  afterwards (a transient failure that a retry fixes);
* ``nobody``: ``550 5.1.1`` at RCPT, always (a permanent rejection).

No TLS, no AUTH: bind it to loopback only, never expose it.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from email import policy
from email.parser import BytesHeaderParser
from pathlib import Path
from types import TracebackType
from typing import Any

from aiosmtpd.controller import Controller

from mailout.transports.smtp import codes as smtpcodes

HOST = "127.0.0.1"
FLAKY = "flaky"
NOBODY = "nobody"
_BIND_TRIES = 5


@dataclass(frozen=True, slots=True)
class Delivered:
    """One message the sink accepted."""

    path: Path
    message_id: str | None
    queue_id: str
    mail_from: str
    rcpt_tos: tuple[str, ...]


def _local_part(address: str) -> str:
    return address.rpartition("@")[0].split("+", 1)[0].lower()


class _Handler:
    """aiosmtpd hooks: the demo faults at RCPT, and saving at the end of DATA."""

    def __init__(self, sink: DevSink) -> None:
        self.sink = sink

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        fault = self.sink.fault_for(address)
        if fault is not None:
            return fault
        envelope.rcpt_tos.append(address)
        return f"{smtpcodes.OK} 2.1.5 Ok"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        data = envelope.original_content or envelope.content or b""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        delivered = self.sink.save(bytes(data), envelope.mail_from, tuple(envelope.rcpt_tos))
        return f"{smtpcodes.OK} 2.0.0 Ok: queued as {delivered.queue_id}"


class DevSink:
    """The sink; use it as a context manager (``with DevSink(dir) as sink: ...``)."""

    def __init__(self, directory: Path, *, faults: bool = True, port: int = 0,
                 on_save: Callable[[Delivered], None] | None = None) -> None:
        self.directory = Path(directory)
        self.faults = faults
        self.host = HOST
        self.port = port  # 0: a free one, chosen at start()
        self.on_save = on_save  # called in the sink's thread after each message is written
        self._lock = threading.Lock()
        self._delivered: list[Delivered] = []
        self._seen: set[str] = set()
        self._controller: Controller | None = None

    @property
    def delivered(self) -> list[Delivered]:
        with self._lock:
            return list(self._delivered)

    def start(self) -> DevSink:
        """Listen on loopback, on ``port`` or a free one. Raises OSError if it cannot
        be bound (the given port is taken)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tries = 1 if self.port else _BIND_TRIES
        for attempt in range(tries):
            # The Controller needs a concrete port (it connects to it to check it is up),
            # so pick a free one first; another process could take it in between, hence
            # the retry.
            port = self.port or _free_port()
            controller = Controller(_Handler(self), hostname=HOST, port=port,
                                    ident="mailout devsink", ready_timeout=5.0)
            try:
                controller.start()
            except (OSError, RuntimeError) as exc:
                if attempt == tries - 1:
                    raise OSError(f"cannot listen on {HOST}:{port}: {exc}") from None
                continue
            self._controller, self.port = controller, port
            return self
        raise OSError("could not bind the sink")  # unreachable: the loop raised

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> DevSink:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def fault_for(self, address: str) -> str | None:
        """The reply that replaces "250" at RCPT for ``address``, if any."""
        if not self.faults:
            return None
        local = _local_part(address)
        if local == NOBODY:
            return (f"{smtpcodes.MAILBOX_UNAVAILABLE} 5.1.1 <{address}>: Recipient address "
                    "rejected: User unknown")
        if local == FLAKY:
            with self._lock:
                first = address.lower() not in self._seen
                self._seen.add(address.lower())
            if first:
                return f"{smtpcodes.LOCAL_ERROR} 4.3.0 Temporary failure, please try again later"
        return None

    def save(self, data: bytes, mail_from: str, rcpt_tos: tuple[str, ...]) -> Delivered:
        """Write one message as the next ``<n>.eml`` and remember it."""
        headers = BytesHeaderParser(policy=policy.default).parsebytes(data)
        raw_id = headers.get("Message-ID")
        queue_id = uuid.uuid4().hex[:10].upper()
        with self._lock:
            path = self.directory / f"{len(self._delivered) + 1}.eml"
            path.write_bytes(data)
            delivered = Delivered(path, None if raw_id is None else str(raw_id).strip(),
                                  queue_id, mail_from, rcpt_tos)
            self._delivered.append(delivered)
        if self.on_save is not None:
            self.on_save(delivered)
        return delivered


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port
