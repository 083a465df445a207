"""``mailout worker --processes N``: several worker processes on one machine.

One Python process is bound to one core by the interpreter lock; a worker is mostly
CPU-bound on rendering and protocol work, so a machine with several cores runs
several. The supervisor starts N ``mailout worker`` children with the same options
(lanes included: each child runs every lane), forwards SIGTERM/SIGINT so they drain
gracefully, and restarts a child that dies unexpectedly (after a short pause, so a
child failing at startup cannot spin). With ``--until-idle`` it waits for all of
them and exits with the worst exit code.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType

log = logging.getLogger("mailout.worker.runtime")

RESTART_PAUSE = 1.0


def supervise(processes: int, child_args: Sequence[str], *, until_idle: bool,
              per_child: Callable[[int], Sequence[str]] | None = None) -> int:
    """Run ``processes`` children ``python -m mailout <child_args>``; return an exit code.

    ``per_child(i)`` adds arguments for child ``i`` (its own metrics port), also when
    that child is restarted.
    """
    command = [sys.executable, "-m", "mailout", *child_args]

    def start(i: int) -> subprocess.Popen[bytes]:
        extra = list(per_child(i)) if per_child else []
        # Our own interpreter and our own command line's arguments: no outside input.
        return subprocess.Popen([*command, *extra])  # noqa: S603

    children = [start(i) for i in range(processes)]
    stopping = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            codes = [c.poll() for c in children]
            if all(code is not None for code in codes):
                return max(abs(code or 0) for code in codes)
            if not stopping and not until_idle:
                for i, code in enumerate(codes):
                    if code is not None:
                        log.error("worker process %d exited with %s; restarting it",
                                  children[i].pid, code)
                        time.sleep(RESTART_PAUSE)
                        children[i] = start(i)
            time.sleep(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for child in children:
            if child.poll() is None:
                child.terminate()
                child.wait(60)
