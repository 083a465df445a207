"""The alert webhook against hostile HTTP servers (issue 14, item 3): a redirect is a
failure and is not followed, and a server that answers a byte at a time is cut off
at the POST's deadline instead of holding the alert."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mailout.support.alerts import Alert, Alerts


class _Recorder(BaseHTTPRequestHandler):
    """Records each request; answers as the class attributes say."""

    seen: list[tuple[str, str]]
    status = 204
    location = ""
    head: bytes = b""  # sent at once, before the drip
    drip: bytes = b""  # sent a byte at a time, drip_every seconds apart, before the status
    drip_every = 0.2
    cut_off: threading.Event

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.seen.append((self.command, self.path))
        if self.drip:
            try:
                self.wfile.write(self.head)
                self.wfile.flush()
                for byte in self.drip:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(self.drip_every)
            except OSError:
                self.cut_off.set()  # the client went away before the answer was complete
            return
        self.send_response(self.status)
        if self.location:
            self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _handle

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _serve(**attrs: Any) -> Iterator[tuple[str, _Recorder]]:
    handler: Any = type("Handler", (_Recorder,), {"seen": [], "cut_off": threading.Event(),
                                                  **attrs})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def elsewhere() -> Iterator[tuple[str, _Recorder]]:
    yield from _serve()


@pytest.mark.parametrize("status", [301, 302, 303, 307])
def test_a_redirect_is_a_failure_and_is_not_followed(
    status: int, elsewhere: tuple[str, _Recorder], caplog: pytest.LogCaptureFixture,
) -> None:
    other_url, other = elsewhere
    for base, hook in _serve(status=status, location=f"{other_url}/stolen"):
        alerts = Alerts(webhook_url=f"{base}/alerts", tries=1)
        alerts.fire(Alert("dead", "message 1 is dead"))
        alerts.close()
        assert hook.seen == [("POST", "/alerts")]
        assert other.seen == []  # nothing reached the redirect's target
        assert alerts.stats == {"delivered": 0, "failed": 1, "dropped": 0}
    assert "redirects are not followed" in caplog.text


def test_a_byte_at_a_time_answer_is_cut_off_at_the_deadline() -> None:
    answer = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
    # The whole answer takes about 9 s; each byte comes well within the 1 s timeout.
    for base, hook in _serve(drip=answer, drip_every=0.2):
        alerts = Alerts(webhook_url=f"{base}/alerts", tries=1, timeout=1.0)
        alerts.fire(Alert("dead", "message 1 is dead"))
        alerts.close(timeout=30)
        assert alerts.stats == {"delivered": 0, "failed": 1, "dropped": 0}
        assert hook.cut_off.wait(10)  # the server saw the client hang up mid-answer


@pytest.mark.parametrize("head", [
    b"HTTP/1.0 200 OK\r\nContent-Length: 40\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 40\r\n\r\n",
])
def test_a_closing_answer_whose_body_trickles_is_cut_off_at_the_deadline(head: bytes) -> None:
    # A closing answer detaches the socket from the connection once its head is read:
    # the cut used to find no socket, and the body's 40 bytes held the alert 20 s.
    for base, hook in _serve(head=head, drip=b"x" * 40, drip_every=0.5):
        alerts = Alerts(webhook_url=f"{base}/alerts", tries=1, timeout=1.0)
        alerts.fire(Alert("dead", "message 1 is dead"))
        assert hook.cut_off.wait(10)  # the client hung up mid-body, within the deadline
        alerts.close(timeout=30)
        assert alerts.stats == {"delivered": 0, "failed": 1, "dropped": 0}


def test_a_2xx_answer_is_delivered() -> None:
    for base, hook in _serve(status=200):
        alerts = Alerts(webhook_url=f"{base}/alerts?token=t", tries=1)
        alerts.fire(Alert("resumed", "sending resumed"))
        alerts.close()
        assert hook.seen == [("POST", "/alerts?token=t")]
        assert alerts.stats == {"delivered": 1, "failed": 0, "dropped": 0}
