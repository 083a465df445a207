"""Side-task supervision: restarts with a doubling backoff, recoveries, giving up."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from mailout.exceptions import MailoutError, WorkerFailed
from mailout.worker.side_tasks import Restart, SideTask, SideTasks

QUICK = Restart(first=0.01, cap=0.04, healthy_after=60.0)


class Flaky:
    """A side task that raises on its first ``failures`` runs, then returns."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ValueError("customer ann@example.com rejected")
        self.starts: list[float] = []

    async def __call__(self) -> None:
        self.starts.append(time.monotonic())
        if len(self.starts) <= self.failures:
            raise self.error


def supervise(spec: SideTask) -> list[WorkerFailed]:
    fatal: list[WorkerFailed] = []

    async def main() -> None:
        await SideTasks(fatal.append).start(spec)

    asyncio.run(main())
    return fatal


def test_a_failing_task_is_restarted_with_a_doubling_capped_backoff() -> None:
    task = Flaky(failures=4)
    assert supervise(SideTask("t", task, QUICK)) == []
    assert len(task.starts) == 5  # four failures, then it ran to its end
    gaps = [b - a for a, b in zip(task.starts, task.starts[1:], strict=False)]
    for gap, backoff in zip(gaps, [0.01, 0.02, 0.04, 0.04], strict=True):
        assert gap >= backoff


def test_failures_in_a_row_past_the_limit_stop_the_worker() -> None:
    task = Flaky(failures=100)
    [failure] = supervise(SideTask("mailout-heartbeat", task,
                                   Restart(first=0.01, cap=0.01, healthy_after=60.0,
                                           give_up_after=3)))
    assert len(task.starts) == 3  # not restarted after the third
    assert isinstance(failure, MailoutError)
    assert isinstance(failure, RuntimeError)
    assert (failure.task, failure.failures, failure.error) == ("mailout-heartbeat", 3,
                                                               "ValueError")
    assert failure.where.startswith("test_side_tasks.py:")
    assert failure.where.endswith(" in __call__")


def test_a_run_that_lasted_counts_as_a_recovery() -> None:
    # Every run lasts the healthy time before it fails: each failure is the first in a
    # row, so a limit of 2 is never reached.
    task = Flaky(failures=4)
    assert supervise(SideTask("t", task, Restart(first=0.01, cap=0.01, healthy_after=0.0,
                                                 give_up_after=2))) == []
    assert len(task.starts) == 5


def test_the_log_names_the_task_and_place_but_never_the_errors_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    task = Flaky(failures=2)
    with caplog.at_level(logging.ERROR, logger="mailout.worker.side_tasks"):
        [failure] = supervise(SideTask("mailout-completions", task,
                                       Restart(first=0.01, cap=0.01, healthy_after=60.0,
                                               give_up_after=2)))
    first, last = caplog.records
    assert first.getMessage().startswith(
        "side task mailout-completions failed (ValueError at test_side_tasks.py:")
    assert first.getMessage().endswith("restarting it in 0.0s")
    assert last.levelno == logging.CRITICAL
    assert "stopping the worker" in last.getMessage()
    assert "ann@example.com" not in caplog.text  # an error's text may quote addresses
    assert "ann@example.com" not in str(failure)


def test_cancel_ends_the_tasks_but_those_kept() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def main() -> tuple[bool, bool]:
        side = SideTasks(lambda failure: None)
        kept = side.start(SideTask("kept", forever, QUICK))
        ended = side.start(SideTask("ended", forever, QUICK))
        await asyncio.sleep(0)
        await side.cancel(keep=("kept",))
        result = ended.cancelled(), kept.done()
        kept.cancel()
        return result

    assert asyncio.run(main()) == (True, False)
