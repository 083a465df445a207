"""The transport breaker: growing pauses, one probe, resume."""

from __future__ import annotations

import time

from mailout.worker.breaker import Breaker


def test_open_gate_gives_all_free_slots() -> None:
    assert Breaker(1, 8).capacity(free=10, in_flight=0) == 10


def test_pause_blocks_then_allows_one_probe() -> None:
    breaker = Breaker(0.05, 1)
    newly, seconds = breaker.pause("bad_credentials")
    assert newly
    assert seconds == 0.05
    assert breaker.capacity(free=10, in_flight=0) == 0
    time.sleep(0.06)
    assert breaker.capacity(free=10, in_flight=0) == 1
    assert breaker.capacity(free=10, in_flight=1) == 0  # the probe is still out


def test_consecutive_pauses_double_up_to_the_cap() -> None:
    breaker = Breaker(1, 5)
    lengths = [breaker.pause("x")[1] for _ in range(5)]
    assert lengths == [1, 2, 4, 5, 5]
    assert [breaker.pause("x")[0] for _ in range(2)] == [False, False]


def test_resume_reopens_and_resets() -> None:
    breaker = Breaker(1, 8)
    assert not breaker.resume()
    breaker.pause("x")
    breaker.pause("x")
    assert breaker.resume()
    assert not breaker.paused
    assert breaker.capacity(free=3, in_flight=2) == 3
    assert breaker.pause("x") == (True, 1)
