"""The shared part of every fake provider: a threaded HTTP server on 127.0.0.1.

A fake subclasses :class:`FakeProvider` and implements :meth:`FakeProvider.handle`,
which sees a parsed :class:`Request` and returns a :class:`Reply` or :data:`DROP`
(read the whole request, then close the connection without a byte of answer: the
client cannot tell whether the message was taken). Faults are set per recipient
address (``refuse``, ``defer``, ``lose``) or for every request (``answer_always``,
``delay``). Anything a fake finds wrong with a request is answered as the provider
would (usually 400/422) *and* recorded in :attr:`FakeProvider.violations`, which the
tests assert empty, so a transport cannot pass by being refused for the wrong reason.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> tuple[list[tuple[str, str]], list[tuple[str, str, bytes, str]]]:
        """A multipart/form-data body: (fields, files as (field, filename, data, type))."""
        head = f"Content-Type: {self.headers['content-type']}\r\n\r\n".encode()
        parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + self.body)
        fields: list[tuple[str, str]] = []
        files: list[tuple[str, str, bytes, str]] = []
        for part in parsed.iter_parts():
            name = part.get_param("name", header="content-disposition")
            filename = part.get_filename()
            data = part.get_payload(decode=True) or b""
            if filename is None:
                fields.append((str(name), data.decode("utf-8")))
            else:
                files.append((str(name), filename, data, part.get_content_type()))
        return fields, files


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None  # JSON-able, or bytes
    headers: dict[str, str] = field(default_factory=dict)


DROP: Final = object()  # answer nothing, close the connection


@dataclass(frozen=True)
class Delivery:
    """A message the fake accepted (or took before dropping the connection)."""

    message_id: str | None
    recipients: tuple[str, ...]
    key: str | None  # the idempotency key as the provider received it, if any
    headers: dict[str, str]  # custom headers as the provider received them
    fields: dict[str, Any]  # the provider-shaped request, for exact checks
    provider_id: str


class FakeProvider:
    """Base of every fake: the server thread, faults, and what was received."""

    name = "fake"

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.delivered: list[Delivery] = []
        self.requests: list[Request] = []
        self.violations: list[str] = []
        self.faults: dict[str, str] = {}
        self.always: Reply | None = None
        self.delay = 0.0
        self.before_reply: Callable[[Delivery], None] | None = None  # crash tests
        self.lock = threading.Lock()
        self._ids = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True,
                                        name=f"fake-{self.name}")

    # -- lifecycle --------------------------------------------------------------------
    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what tests set -----------------------------------------------------------------
    def refuse(self, address: str) -> None:
        self.faults[address.lower()] = "refuse"

    def defer(self, address: str) -> None:
        self.faults[address.lower()] = "defer"

    def lose(self, address: str) -> None:
        self.faults[address.lower()] = "lose"

    def answer_always(self, reply: Reply | None) -> None:
        self.always = reply

    def reset(self) -> None:
        with self.lock:
            self.delivered.clear()
            self.requests.clear()
            self.faults.clear()
            self.always = None

    # -- for subclasses -----------------------------------------------------------------
    def handle(self, request: Request) -> Reply | object:
        raise NotImplementedError

    def next_id(self) -> str:
        with self.lock:
            self._ids += 1
            return f"{self.name}-{self._ids:06d}"

    def violation(self, what: str) -> None:
        with self.lock:
            self.violations.append(what)

    def fault(self, recipients: tuple[str, ...]) -> str | None:
        for address in recipients:
            found = self.faults.get(address.lower())
            if found:
                return found
        return None

    def accept(self, delivery: Delivery) -> None:
        if self.before_reply is not None:
            self.before_reply(delivery)
        with self.lock:
            self.delivered.append(delivery)


def _handler(fake: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the tests read what the fake recorded instead

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path, _, query = self.path.partition("?")
            request = Request(self.command, path, query,
                              {k.lower(): v for k, v in self.headers.items()}, body)
            with fake.lock:
                fake.requests.append(request)
            if fake.delay:
                time.sleep(fake.delay)
            answer = fake.always if fake.always is not None else fake.handle(request)
            if answer is DROP:
                self.close_connection = True
                with contextlib.suppress(OSError):  # the client may be gone already
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            assert isinstance(answer, Reply)
            payload = answer.body if isinstance(answer.body, bytes) else (
                b"" if answer.body is None else json.dumps(answer.body).encode())
            try:
                self.send_response(answer.status)
                if not isinstance(answer.body, bytes):
                    self.send_header("Content-Type", "application/json")
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up waiting (a timeout test)

        do_GET = do_POST = do_PUT = do_DELETE = _any

    return Handler
