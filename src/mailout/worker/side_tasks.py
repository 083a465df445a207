"""The worker's side tasks, supervised: each named, watched, restarted or fatal.

Beside its lanes a worker runs tasks that keep it honest: the completion writer, the
lease heartbeat, the outage alert watch, the send summary and, on PostgreSQL, the
NOTIFY listener. Each handles the failures it expects (a database outage) itself. An
unexpected error (a bug, an error type nobody listed) used to end the task silently:
with the heartbeat gone, leases ran out while their sends went on, and the rows were
sent twice. So each runs under :meth:`SideTasks.start` with a :class:`Restart` policy:

* it is restarted after a backoff that doubles up to a cap, and logged at ERROR with
  its name, the error's type and the line that raised it;
* a run that lasted ``healthy_after`` seconds counts as a recovery: the backoff and
  the count of failures in a row start again;
* with ``give_up_after``, that many failures in a row are fatal: the worker is told
  (``on_fatal``), stops, and :meth:`mailout.worker.runtime.Worker.run` raises
  :class:`mailout.exceptions.WorkerFailed` (``mailout worker`` exits 4).

Which task gets which policy, and why, is in :mod:`mailout.worker.runtime`. A task
that returns has finished its work (the completion writer, once closed and empty);
cancellation is how the worker ends the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from mailout.exceptions import WorkerFailed

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Restart:
    """How a side task is restarted after an unexpected error."""

    first: float  # seconds before the first restart
    cap: float  # the backoff doubles up to this
    healthy_after: float  # a run this long was a recovery: the count starts again
    give_up_after: int | None = None  # failures in a row that stop the worker; None: never


@dataclass(frozen=True, slots=True)
class SideTask:
    """A named side task: ``run`` is started anew on each restart."""

    name: str
    run: Callable[[], Coroutine[Any, Any, None]]
    restart: Restart


class SideTasks:
    """Starts side tasks under supervision, and ends them."""

    def __init__(self, on_fatal: Callable[[WorkerFailed], None]) -> None:
        self._on_fatal = on_fatal
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, spec: SideTask) -> asyncio.Task[None]:
        """Run ``spec`` in a task named after it, supervised."""
        task = asyncio.create_task(self._supervise(spec), name=spec.name)
        self._tasks[spec.name] = task
        return task

    async def cancel(self, *, keep: tuple[str, ...] = ()) -> None:
        """Cancel every task but ``keep`` and wait for them to end."""
        ending = [t for name, t in self._tasks.items() if name not in keep]
        for task in ending:
            task.cancel()
        await asyncio.gather(*ending, return_exceptions=True)

    async def _supervise(self, spec: SideTask) -> None:
        policy = spec.restart
        failures, backoff = 0, policy.first
        while True:
            started = time.monotonic()
            try:
                await spec.run()
                return  # its work is done
            except Exception as exc:  # any error: what supervision is for
                if time.monotonic() - started >= policy.healthy_after:
                    failures, backoff = 0, policy.first
                failures += 1
                error, where = type(exc).__name__, _where(exc)
                if policy.give_up_after is not None and failures >= policy.give_up_after:
                    log.critical("side task %s failed %d times in a row (%s at %s): stopping "
                                 "the worker", spec.name, failures, error, where,
                                 extra={"event": "side_task_fatal", "task": spec.name,
                                        "failures": failures, "error": error})
                    self._on_fatal(WorkerFailed(spec.name, failures, error, where))
                    return
                log.error("side task %s failed (%s at %s); restarting it in %.1fs",
                          spec.name, error, where, backoff,
                          extra={"event": "side_task_failed", "task": spec.name,
                                 "failures": failures, "error": error})
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, policy.cap)


def _where(exc: BaseException) -> str:
    """``file.py:123 in function`` of the line that raised ``exc``.

    Only the place: an error's message may quote SQL parameters (addresses, reply
    texts), which logs never hold.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name}"
