"""The docs' shell blocks, run as a reader pastes them into a shell.

Blocks are read from Markdown with the file and line of their fence, and run with
``bash -e -o pipefail`` in a directory of the test's choosing, in a user's
environment (no test settings: no ``MAILOUT_*``, ``SMTP_*`` or ``MAIL_FROM``) with
this interpreter's bin directory first on ``PATH``, so ``mailout`` is the checkout's,
and nothing is installed.

A block a reader can paste as it stands is marked runnable with an HTML comment on
the line before its fence (GitHub shows nothing of it)::

    <!-- runnable -->
    ```sh
    mailout status
    ```

:func:`run_blocks` runs blocks in order, each in a shell of its own, the way a reader
pastes them one after the other into one terminal: what a block exports and the
directory it ends in carry over to the next. A failure names the block's file:line.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
_FENCE = re.compile(r"^\s*```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int  # of the opening fence, counted from 1
    lang: str  # the fence's info string: "sh", "python", "" ...
    text: str  # dedented, ending in a newline
    runnable: bool  # marked with MARKER on the line before the fence

    @property
    def where(self) -> str:
        path = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{path}:{self.line}"


def blocks(path: Path, section: str | None = None) -> list[Block]:
    """Every fenced block of ``path`` (only under the ``## section`` heading, up to the
    next ``## `` heading, when a section is named), in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    current: str | None = None  # the ``## `` heading we are under
    i = 0
    while i < len(lines):
        if lines[i].startswith("## "):
            current = lines[i][3:].strip()
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        lang = opening.group(1)
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{path}:{i + 1}: a code fence that is never closed"
        if section is None or current == section:
            body = textwrap.dedent("\n".join(lines[i + 1:end])) + "\n"
            marked = i > 0 and lines[i - 1].strip() == MARKER
            found.append(Block(path, i + 1, lang, body, marked))
        i = end + 1
    if section is not None:
        assert any(line == f"## {section}" for line in lines), f"{path}: no ## {section}"
    return found


def runnable(path: Path) -> list[Block]:
    """The blocks of ``path`` marked runnable; each must be a shell block, and each
    marker must sit right above a fence (a stray one would mark nothing)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines[:-1]):
        if line.strip() == MARKER:
            assert _FENCE.match(lines[n + 1]), f"{path}:{n + 1}: {MARKER} not above a fence"
    marked = [b for b in blocks(path) if b.runnable]
    for block in marked:
        assert block.lang in ("sh", "bash"), f"{block.where}: a runnable block must be sh"
    return marked


def user_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A user's shell environment: this one without the test run's settings (mailout's,
    the test Django project's; COLUMNS and LINES, which pytest-xdist sets), with this
    interpreter's virtualenv first on PATH (as ``. .venv/bin/activate``)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MAILOUT_", "SMTP_"))
           and k not in ("MAIL_FROM", "COLUMNS", "LINES", "VIRTUAL_ENV",
                         "DJANGO_SETTINGS_MODULE")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(Path(venv_bin).parent)
    env.update(extra or {})
    return env


def run_script(script: str, cwd: Path, env: Mapping[str, str] | None = None,
               timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``script`` in ``bash -e -o pipefail``, in ``cwd``, in :func:`user_env`."""
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd,
                          env=dict(env) if env is not None else user_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_blocks(found: Iterable[Block], cwd: Path, env: Mapping[str, str] | None = None,
               replace: Mapping[str, str] | None = None,
               timeout: float = 120) -> list[subprocess.CompletedProcess[str]]:
    """Run ``found`` in order, each in its own bash, starting in ``cwd``: exports and
    the working directory carry over, as in one terminal. ``replace`` maps text of the
    docs to what the test runs instead (a free port for the documented one). Stops at
    the first block that fails and fails the test, naming its file:line, after
    stopping the dev sinks a block started under ``cwd`` (on success the docs stop
    their own)."""
    fd, name = tempfile.mkstemp(prefix="shell-blocks-", suffix=".sh")
    os.close(fd)
    state = Path(name)
    done: list[subprocess.CompletedProcess[str]] = []
    try:
        for block in found:
            text = block.text
            for old, new in (replace or {}).items():
                text = text.replace(old, new)
            # The block's own status decides (the last command of an && list does not
            # stop bash -e); then what it exported and where it ended are kept.
            script = (f"if [ -s '{state}' ]; then . '{state}'; fi\n{text}\n"
                      "__block_status=$?\n"
                      f"{{ export -p; printf 'cd -- %q\\n' \"$PWD\"; }} > '{state}'\n"
                      "exit $__block_status\n")
            proc = run_script(script, cwd, env, timeout)
            done.append(proc)
            assert proc.returncode == 0, (
                f"{block.where}: the block exited {proc.returncode}\n"
                f"--- the block ---\n{text}--- stdout ---\n{proc.stdout}"
                f"--- stderr ---\n{proc.stderr}")
    except BaseException:
        stop_sinks(cwd)
        raise
    finally:
        state.unlink(missing_ok=True)
    return done


def stop_sinks(root: Path) -> None:
    """Stop every dev sink a block under ``root`` started and left running (its
    ``mailout dev-sink --background`` pid file), e.g. when the block failed first."""
    for pid_file in root.rglob("dev-sink.pid"):
        pid = int(pid_file.read_text())
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """True while ``pid`` is a live process (not gone, not a zombie)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
