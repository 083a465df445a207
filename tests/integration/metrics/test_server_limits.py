"""The metrics/health server against hostile clients: loopback by default, and idle
sockets cannot use up a worker's file descriptors (issue 14, item 1)."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import settings_for, worker_env
from sqlalchemy import select

from mailout import db
from mailout.db.schema import messages
from mailout.metrics.prometheus import PrometheusObserver, start_metrics_server
from mailout.outbox import EnqueueSettings, enqueue
from mailout.worker.build import build_worker

IDLE_SOCKETS = 300
FD_LIMIT = 160  # well under IDLE_SOCKETS: one thread and descriptor each would run out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _accept_queue(port: int) -> int:
    """Connections waiting in the accept queue of the socket listening on ``port``
    (Linux: a listening socket's rx_queue in /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
            return int(queues.split(":")[1], 16)
    raise AssertionError(f"nothing listens on port {port}")


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_the_metrics_server_binds_loopback_by_default(
    sqlite_url: str, smtp_server: SmtpTestServer,
) -> None:
    worker = build_worker(settings_for(sqlite_url, smtp_server), observer=PrometheusObserver())
    try:
        with start_metrics_server(0, worker) as server:
            assert server.host == "127.0.0.1"
            with urllib.request.urlopen(server.url + "/", timeout=5) as answer:
                assert answer.status == 200
    finally:
        worker.engine.dispose()


def test_worker_help_offers_metrics_host() -> None:
    exe = Path(sys.executable).parent / "mailout"
    out = subprocess.run([str(exe), "worker", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "--metrics-host" in out
    assert "MAILOUT_METRICS_HOST" in out


@pytest.mark.slow
def test_idle_metrics_sockets_do_not_stop_the_worker_sending(
    sqlite_url: str, smtp_server: SmtpTestServer, tmp_path: Path,
) -> None:
    """Hundreds of idle connections to --metrics-port, in a worker process allowed
    only FD_LIMIT descriptors: its SMTP connections still open and every message goes."""
    port = _free_port()
    env = {**os.environ, **worker_env(sqlite_url, smtp_server)}
    exe = Path(sys.executable).parent / "mailout"
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(exe), "worker", "--metrics-port", str(port)], env=env,
                                stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_limit_descriptors)
    idle: list[socket.socket] = []
    engine = db.make_engine(sqlite_url)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        for _ in range(IDLE_SOCKETS - 1):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        # The server has taken every one from its accept queue (and kept or closed it).
        while _accept_queue(port) > 0:
            assert time.monotonic() < deadline + 60, log.read_text()
            time.sleep(0.05)
        with engine.begin() as conn:
            ids = [enqueue(conn, to=f"user{i}@example.com", subject="Hi", text="Hello",
                           settings=EnqueueSettings(message_id_domain="example.com")).id
                   for i in range(3)]
        deadline = time.monotonic() + 30
        while True:
            with engine.connect() as conn:
                statuses = conn.execute(select(messages.c.status).where(
                    messages.c.id.in_(ids))).scalars().all()
            if all(s == "sent" for s in statuses):
                break
            assert time.monotonic() < deadline, (statuses, log.read_text()[-2000:])
            time.sleep(0.2)
        assert len(smtp_server.messages) == 3
    finally:
        for sock in idle:
            sock.close()
        proc.terminate()
        proc.wait(timeout=30)
        engine.dispose()


def _answers(url: str) -> bool:
    """Whether the server answers at all (a worker not running answers 503)."""
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, urllib.error.URLError):
        return False


def test_clients_trickling_a_request_cannot_hold_every_slot(
    sqlite_url: str, smtp_server: SmtpTestServer, capfd: pytest.CaptureFixture[str],
) -> None:
    """16 clients each send a header byte well within the per-read timeout, for an hour;
    the one deadline per connection cuts every one of them, /healthz answers again,
    and the clients cut off leave no traceback behind."""
    worker = build_worker(settings_for(sqlite_url, smtp_server), observer=PrometheusObserver())
    stop = threading.Event()
    cut = [threading.Event() for _ in range(16)]

    def trickle(mine: threading.Event) -> None:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 10_000:
                if stop.wait(0.3):
                    return
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    mine.set()  # cut off: what the server must do
                    return

    try:
        with start_metrics_server(0, worker, max_connections=16, timeout=2.0) as server:
            clients = [threading.Thread(target=trickle, args=(c,), daemon=True) for c in cut]
            for client in clients:
                client.start()
            # Without the deadline none is ever cut (each would hold its slot an hour).
            for mine in cut:
                assert mine.wait(120), "a trickling client kept its slot"
            deadline = time.monotonic() + 60
            while not _answers(server.url):
                assert time.monotonic() < deadline, "the server did not answer again"
                time.sleep(0.1)
            stop.set()
            for client in clients:
                client.join(10)
    finally:
        stop.set()
        worker.engine.dispose()
    said = capfd.readouterr()
    assert "Traceback" not in said.err + said.out
