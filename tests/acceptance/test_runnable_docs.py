"""Every shell block of the README and docs/cli.md marked ``<!-- runnable -->`` runs as
written, in order, in a fresh folder of a clone, so the docs cannot drift from the
commands (issue 33, item 19). Blocks that need a provider, a server or rows of the
reader's own are not marked; tests/support/shell_blocks.py has the convention."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.shell_blocks import (
    REPO,
    blocks,
    free_port,
    run_blocks,
    runnable,
    running,
    stop_sinks,
)

pytestmark = pytest.mark.slow  # shells running the docs' commands, a dev sink and all

DOCS = ["README.md", "docs/cli.md"]
# The one change made to the docs' text: another test run on this machine may hold 2525.
PORT_IN_DOCS = "SMTP_PORT=2525"


@pytest.mark.parametrize("doc", DOCS)
def test_the_runnable_blocks_run_as_written(doc: str, tmp_path: Path) -> None:
    marked = runnable(REPO / doc)
    assert marked, f"{doc}: no block is marked runnable"
    (tmp_path / "examples").symlink_to(REPO / "examples")  # what a clone has
    try:
        done = run_blocks(marked, tmp_path,
                          replace={PORT_IN_DOCS: f"SMTP_PORT={free_port()}"})
        assert len(done) == len(marked)
        # The docs clean up after themselves: a sink they started, they stop.
        deadline = time.monotonic() + 20
        for pid_file in tmp_path.rglob("dev-sink.pid"):
            while running(int(pid_file.read_text())):
                assert time.monotonic() < deadline, f"{doc} leaves a dev sink running"
                time.sleep(0.1)
    finally:
        stop_sinks(tmp_path)


def test_a_failing_block_is_named_by_file_and_line(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n<!-- runnable -->\n```sh\ntrue\n```\n\n"
                   "```sh\nfalse  # not marked: never run\n```\n\n"
                   "<!-- runnable -->\n```sh\nexport GREETING=hello\ncd sub || mkdir sub\n```\n\n"
                   "<!-- runnable -->\n```sh\n[ \"$GREETING\" = hello ] && [ -d ../sub ]\n"
                   "mailout --version\nmailout show no-such-key\n```\n", encoding="utf-8")
    found = blocks(doc)
    assert [(b.line, b.runnable) for b in found] == [(4, True), (8, False), (13, True),
                                                      (19, True)]
    with pytest.raises(AssertionError) as caught:
        run_blocks(runnable(doc), tmp_path)
    message = str(caught.value)
    # The third block failed (its last command), after what the second exported and
    # the folder it moved to carried over.
    assert message.startswith(f"{doc}:19: the block exited 1"), message
    assert "no-such-key" in message


def test_a_marker_that_marks_no_block_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n<!-- runnable -->\n\n```sh\ntrue\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match=r"doc\.md:3: <!-- runnable --> not above a fence"):
        runnable(doc)
