"""The README's Quickstart, run as a user runs it: its shell block, pasted into bash
in a fresh directory with the virtualenv on PATH, ends with the message delivered
to the local sink (issue 14, items 13 and 14)."""

from __future__ import annotations

import re
import time
from email import message_from_bytes, policy
from pathlib import Path

import pytest

from tests.support.shell_blocks import REPO, blocks, free_port, run_blocks, running

pytestmark = pytest.mark.slow  # a shell running the quickstart, servers and all

PORT_IN_README = "SMTP_PORT=2525"


def test_the_quickstart_pasted_into_a_shell_delivers_its_message(tmp_path: Path) -> None:
    [block] = [b for b in blocks(REPO / "README.md", "Quickstart") if b.runnable]
    # The only change to the text: another test run on this machine may hold 2525.
    assert PORT_IN_README in block.text
    (tmp_path / "examples").symlink_to(REPO / "examples")  # what a clone has
    [done] = run_blocks([block], tmp_path, replace={PORT_IN_README: f"SMTP_PORT={free_port()}"},
                        timeout=240)
    out = done.stdout + done.stderr
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
    while running(pid):
        assert time.monotonic() < deadline, "the dev sink still runs after the kill"
        time.sleep(0.1)
