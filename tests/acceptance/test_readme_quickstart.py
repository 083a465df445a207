"""The README's Quickstart, run as a user runs it: its shell block, pasted into bash
in a fresh directory with the virtualenv on PATH, ends with the message delivered
to the local sink (issue 14, items 13 and 14)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from email import message_from_bytes, policy
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a shell running the quickstart, servers and all

REPO = Path(__file__).resolve().parents[2]
PORT_IN_README = "SMTP_PORT=2525"


def quickstart_block() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart\n", 1)[1]
    found = re.search(r"```sh\n(.*?)```", section, re.S)
    assert found, "the Quickstart has no sh block"
    return found.group(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_quickstart_pasted_into_a_shell_delivers_its_message(tmp_path: Path) -> None:
    block = quickstart_block()
    # The only change to the text: another test run on this machine may hold 2525.
    assert PORT_IN_README in block
    script = block.replace(PORT_IN_README, f"SMTP_PORT={free_port()}")
    (tmp_path / "examples").symlink_to(REPO / "examples")  # what a clone has
    env = {k: v for k, v in os.environ.items()  # a user's shell: no test settings
           if not k.startswith(("MAILOUT_", "SMTP_"))
           and k not in ("MAIL_FROM", "COLUMNS", "LINES")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(Path(venv_bin).parent)
    try:
        done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240, check=False)
    finally:
        _stop_sink(tmp_path / "sink-mail" / "dev-sink.pid")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "idle: 1 sent" in done.stdout, out
    assert re.search(r"status\s*│?\s*sent", done.stdout), out
    emls = sorted((tmp_path / "sink-mail").glob("*.eml"))
    assert [p.name for p in emls] == ["1.eml"], out
    mail = message_from_bytes(emls[0].read_bytes(), policy=policy.default)
    assert mail["Subject"] == "Your order #1234 is confirmed"
    assert mail["To"] == "buyer@example.com"
    assert "Coffee beans" in mail.get_body(("plain",)).get_content()
    pid = int((tmp_path / "sink-mail" / "dev-sink.pid").read_text())
    deadline = time.monotonic() + 20  # the last line stopped the sink: it exits shortly
    while _running(pid):
        assert time.monotonic() < deadline, "the dev sink still runs after the kill"
        time.sleep(0.1)


def _stop_sink(pid_file: Path) -> None:
    """If the script failed before its last line, stop the sink it started."""
    if pid_file.exists():
        pid = int(pid_file.read_text())
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """True while ``pid`` is a live process (not gone, not a zombie)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
