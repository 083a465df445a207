"""The shared breaker: one failure per probe cycle, doubling backoff, one probe, close;
and the worker's two breakers built on it."""

from __future__ import annotations

import pytest

from mailout.support.breaker import Breaker, Trip
from mailout.worker.breaker import Breakers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(base: float = 1, cap: float = 8) -> tuple[Breaker, Clock]:
    clock = Clock()
    return Breaker(base, cap, clock=clock), clock


def test_a_closed_breaker_gives_all_free_slots() -> None:
    b, _ = breaker()
    assert b.capacity(free=10, in_flight=0) == 10


def test_an_open_breaker_blocks_then_lets_one_probe_through() -> None:
    b, clock = breaker(base=5)
    assert b.fail("connect_refused", 1) == Trip(opened=True, seconds=5)
    assert b.capacity(free=10, in_flight=0) == 0
    clock.now += 5
    assert b.capacity(free=10, in_flight=1) == 0  # a send from before is still out
    assert b.capacity(free=10, in_flight=0) == 1
    b.probe_started(7)
    assert b.capacity(free=10, in_flight=1) == 0  # the probe is out


def test_sends_in_flight_when_it_opened_do_not_count() -> None:
    b, _ = breaker(base=30, cap=600)
    trips = [b.fail("bad_credentials", i) for i in range(10)]  # 10 sends in flight
    assert trips == [Trip(True, 30)] + [None] * 9


def test_each_failed_probe_doubles_the_backoff_up_to_the_cap() -> None:
    b, clock = breaker(base=1, cap=5)
    seconds = [b.fail("x", 0).seconds]  # type: ignore[union-attr]  # it opens: never None
    for probe in range(1, 6):
        clock.now += 10
        b.probe_started(probe)
        b.fail("x", 99)  # a straggler: no effect
        trip = b.fail("x", probe)
        assert trip is not None
        assert not trip.opened
        seconds.append(trip.seconds)
    assert seconds == [1, 2, 4, 5, 5, 5]
    assert b.failed_probes == 5


def test_an_inconclusive_probe_lets_the_next_message_probe() -> None:
    b, clock = breaker()
    b.fail("x", 0)
    clock.now += 1
    b.probe_started(3)
    assert b.capacity(free=4, in_flight=0) == 0
    b.probe_inconclusive(3)  # e.g. a render error: the transport was not asked
    assert b.capacity(free=4, in_flight=0) == 1


def test_close_resets_and_a_new_failure_starts_from_the_base() -> None:
    b, clock = breaker(base=1, cap=8)
    assert not b.close()
    b.fail("x", 0)
    clock.now += 1
    b.probe_started(1)
    b.fail("x", 1)
    assert b.close()
    assert not b.is_open
    assert b.reason is None
    assert b.capacity(free=3, in_flight=2) == 3
    assert b.fail("y", 2) == Trip(True, 1)


def test_open_for_counts_from_the_first_failure() -> None:
    b, clock = breaker()
    b.fail("x", 0)
    clock.now += 42
    assert b.open_for() == 42


def test_the_two_breakers_are_distinct_and_claims_follow_the_stricter() -> None:
    breakers = Breakers(30, 600, 5, 300)
    assert not breakers.paused
    breakers.outage.fail("connect_refused", 1)
    assert breakers.paused
    assert not breakers.pause.is_open
    assert breakers.capacity(free=10, in_flight=0) == 0
    assert breakers.outage.base == 5
    assert breakers.pause.base == 30


def test_admit_lets_everything_through_while_closed_and_one_probe_while_open() -> None:
    b, clock = breaker(base=30, cap=600)
    assert all(b.admit(token) for token in range(5))
    assert [b.fail("unauthorized", t) for t in range(5)] == [Trip(True, 30)] + [None] * 4
    assert not b.admit(10)  # inside the backoff
    clock.now += 30
    assert b.probe_due
    assert b.admit(11)  # the probe
    assert not b.admit(12)  # one probe at a time
    assert b.fail("unauthorized", 12) is None  # not the probe: no evidence
    assert b.fail("unauthorized", 11) == Trip(False, 60)
    clock.now += 60
    assert b.admit(13)
    assert b.close()
    assert b.admit(14)


def test_a_probe_that_never_answered_frees_the_slot() -> None:
    b, clock = breaker(base=1)
    b.fail("x", 0)
    clock.now += 1
    assert b.admit(1)
    b.probe_inconclusive(1)  # cancelled before an answer
    assert b.admit(2)


def test_a_send_picked_before_it_opened_is_not_the_probe_and_the_first_waits_its_base() -> None:
    # Issue 33, item 15: a claim in flight when the breaker opened made its message the
    # probe 14 ms into the outage; it failed too, and the next wait doubled at once.
    b, clock = breaker(base=5, cap=300)
    assert b.fail("connect_refused", 1) == Trip(opened=True, seconds=5)
    clock.now += 0.014
    taken = b.probe_started(2)  # claimed before it opened
    assert b.fail("connect_refused", 2) is None  # no evidence: the wait stays 5 s
    assert taken is False
    assert b.seconds_left() == pytest.approx(5 - 0.014)
    clock.now += 5 - 0.014
    assert b.probe_started(3) is True  # the first probe, its base interval after
    assert b.fail("connect_refused", 3) == Trip(opened=False, seconds=10)


def test_the_worker_breakers_take_a_probe_only_when_every_open_one_has_it_due() -> None:
    breakers = Breakers(30, 600, 5, 300)
    clock = Clock()
    breakers.pause.clock = breakers.outage.clock = clock
    breakers.outage.fail("connect_refused", 1)
    assert breakers.probe_started(2) is False
    assert breakers.outage.fail("connect_refused", 2) is None
    clock.now += 5
    assert breakers.probe_started(3) is True
    assert breakers.probe_started(4) is False  # one probe at a time
