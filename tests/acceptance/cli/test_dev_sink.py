"""``mailout dev-sink --background`` as a script uses it: real child process, real port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _dev_sink(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mailout", "dev-sink", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )


def test_background_reports_a_port_taken_by_another_process_instead_of_success(
    tmp_path: Path,
) -> None:
    # Someone else listens on the port: it answers connections, but the sink cannot bind.
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    port = other.getsockname()[1]
    try:
        result = _dev_sink("--port", str(port), "--dir", "mail", "--background", cwd=tmp_path)
    finally:
        other.close()
    pid_file = tmp_path / "mail" / "dev-sink.pid"
    if pid_file.exists():  # the old behaviour: it claimed success; stop its child
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    assert result.returncode == 1, result.stdout
    assert "dev-sink did not start" in result.stderr
    assert not pid_file.exists()


def test_background_returns_once_its_own_child_listens(tmp_path: Path) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    # A second start in the same directory appends to the same log: only its own lines count.
    for _ in range(2):
        result = _dev_sink("--port", str(port), "--dir", "mail", "--background", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        pid = int((tmp_path / "mail" / "dev-sink.pid").read_text())
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                assert conn.recv(512).startswith(b"220")
        finally:
            os.kill(pid, signal.SIGTERM)
            _wait_gone(pid)


def _wait_gone(pid: int) -> None:
    """Wait until the sink exited (a zombie counts: init, not this test, reaps it)."""
    status = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = status.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in {"Z", "X"}:
            return
        time.sleep(0.05)
    pytest.fail(f"dev-sink {pid} still running 30 s after SIGTERM")
