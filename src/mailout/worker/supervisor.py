"""``mailout worker --processes N``: several worker processes on one machine.

One Python process is bound to one core by the interpreter lock; a worker is mostly
CPU-bound on rendering and protocol work, so a machine with several cores runs
several. The supervisor starts N ``mailout worker`` children with the same options
(lanes included: each child runs every lane, unless a lane is pinned to processes of
its own with ``name:4@1``, see :func:`process_plan`), forwards SIGTERM/SIGINT so
they drain gracefully, and restarts a child that dies unexpectedly (after a short
pause, so a child failing at startup cannot spin). With ``--until-idle`` it waits
for all of them and exits with the worst exit code.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from mailout.delivery.policy import Lane

log = logging.getLogger(__name__)

RESTART_PAUSE = 1.0


def process_plan(lanes: Sequence[Lane], processes: int) -> list[str] | None:
    """The lanes (a MAILOUT_LANES spec) each worker process runs, one entry per process;
    None when no lane is pinned (every process runs every lane).

    A pinned lane (``critical:4@1``) runs alone in its own processes, so a bulk lane's
    rendering never holds its event loop; the unpinned lanes run together in
    ``processes`` processes. Raises ValueError when every lane is pinned and
    ``processes`` asks for more than one shared process (it would have nothing to run).
    """
    if all(lane.processes is None for lane in lanes):
        return None
    shared = [lane.spec for lane in lanes if lane.processes is None]
    if not shared and processes > 1:
        raise ValueError("every lane is pinned to its own processes (@N): "
                         "--processes has no lane left to run")
    plan = [",".join(shared)] * processes if shared else []
    for lane in lanes:
        plan += [lane.spec] * (lane.processes or 0)
    return plan


def supervise(processes: int, child_args: Sequence[str], *, until_idle: bool,
              per_child: Callable[[int], Sequence[str]] | None = None,
              env: Mapping[str, str] | None = None) -> int:
    """Run ``processes`` children ``python -m mailout <child_args>``; return an exit code.

    ``per_child(i)`` adds arguments for child ``i`` (its own metrics port), also when
    that child is restarted. ``env`` is the children's environment (default: ours);
    secrets such as the database URL go there, not into ``child_args``.
    """
    command = [sys.executable, "-m", "mailout", *child_args]

    def start(i: int) -> subprocess.Popen[bytes]:
        extra = list(per_child(i)) if per_child else []
        # Our own interpreter and our own command line's arguments: no outside input.
        return subprocess.Popen([*command, *extra], env=env)  # noqa: S603

    children: list[subprocess.Popen[bytes]] = []
    stop_signal: int | None = None
    signalled: set[int] = set()  # pids the stop signal was forwarded to

    def forward_stop(signum: int) -> None:
        for child in children:
            if child.pid not in signalled and child.poll() is None:
                child.send_signal(signum)
                signalled.add(child.pid)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stop_signal
        stop_signal = signum
        forward_stop(signum)

    # Before the first child starts: a signal that came while a child was starting
    # would otherwise kill the supervisor by default and leave that child running.
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for i in range(processes):
            if stop_signal is None:
                children.append(start(i))
        while True:
            # A child that started while the signal was being handled (the handler runs
            # between two bytecodes: after Popen returned, before the child was listed)
            # gets it here.
            if stop_signal is not None:
                forward_stop(stop_signal)
            codes = [c.poll() for c in children]
            if all(code is not None for code in codes):  # none started: stopped at once
                return max((abs(code or 0) for code in codes), default=0)
            if stop_signal is None and not until_idle:
                for i, code in enumerate(codes):
                    if code is not None:
                        log.error("worker process %d exited with %s; restarting it",
                                  children[i].pid, code,
                                  extra={"event": "worker_exited", "pid": children[i].pid,
                                         "exit_code": code})
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
