"""Backoff bounds, jitter, give-up rules and expiry handling."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from mailout.delivery.policy import (
    GiveUp,
    Reschedule,
    RetryPolicy,
    after_transient_failure,
    backoff_bounds,
    backoff_delay,
    is_expired,
)
from mailout.exceptions import ConfigError

POLICY = RetryPolicy()  # base 30, factor 2, cap 3600, 8 attempts, min 1
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("attempts", "high"),
    [(1, 30.0), (2, 60.0), (3, 120.0), (4, 240.0), (7, 1920.0), (8, 3600.0), (9, 3600.0)],
)
def test_bounds_grow_exponentially_then_stop_at_cap(attempts: int, high: float) -> None:
    assert backoff_bounds(POLICY, attempts) == (1.0, high)


@pytest.mark.parametrize("attempts", [50, 1_100, 10**6, 10**18])
def test_huge_attempt_counts_do_not_overflow(attempts: int) -> None:
    assert backoff_bounds(POLICY, attempts) == (1.0, 3600.0)
    assert 1.0 <= backoff_delay(POLICY, attempts, random.Random(1)) <= 3600.0


def test_factor_one_is_constant() -> None:
    policy = RetryPolicy(base_seconds=10, factor=1, cap_seconds=10)
    assert {backoff_bounds(policy, n) for n in (1, 5, 10**9)} == {(1.0, 10.0)}


@pytest.mark.parametrize("attempts", [0, -3])
def test_attempts_below_one_are_a_bug(attempts: int) -> None:
    with pytest.raises(ValueError, match="attempts"):
        backoff_bounds(POLICY, attempts)


@pytest.mark.parametrize("attempts", range(1, 12))
def test_delays_stay_in_bounds_and_use_the_whole_range(attempts: int) -> None:
    rng = random.Random(attempts)
    low, high = backoff_bounds(POLICY, attempts)
    delays = [backoff_delay(POLICY, attempts, rng) for _ in range(2_000)]
    assert all(low <= d <= high for d in delays)
    # Full jitter: draws spread over the range instead of clustering at the top.
    assert min(delays) < low + 0.1 * high
    assert max(delays) > 0.9 * high


def test_same_seed_same_delays() -> None:
    first = [backoff_delay(POLICY, 3, random.Random(7)) for _ in range(3)]
    second = [backoff_delay(POLICY, 3, random.Random(7)) for _ in range(3)]
    assert first == second


def test_min_seconds_floors_the_delay() -> None:
    class Zero(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return 0.0

    assert backoff_delay(POLICY, 1, Zero()) == 1.0


@pytest.mark.parametrize(("attempts", "max_attempts"), [(8, 8), (9, 8), (1, 1)])
def test_give_up_at_max_attempts(attempts: int, max_attempts: int) -> None:
    policy = RetryPolicy(max_attempts=max_attempts)
    decision = after_transient_failure(
        policy, attempts=attempts, now=NOW, expires_at=None, rng=random.Random(0)
    )
    assert decision == GiveUp("max_attempts")


@pytest.mark.parametrize("past", [timedelta(0), timedelta(seconds=1), timedelta(days=3)])
def test_give_up_when_expired(past: timedelta) -> None:
    decision = after_transient_failure(
        POLICY, attempts=2, now=NOW, expires_at=NOW - past, rng=random.Random(0)
    )
    assert decision == GiveUp("max_age")


def test_reschedule_within_bounds_when_far_from_expiry() -> None:
    decision = after_transient_failure(
        POLICY, attempts=3, now=NOW, expires_at=NOW + timedelta(days=1), rng=random.Random(0)
    )
    assert isinstance(decision, Reschedule)
    low, high = backoff_bounds(POLICY, 3)
    assert low <= decision.delay_seconds <= high


@pytest.mark.parametrize(
    ("left", "limit"),
    [(100.0, 99.0), (10.0, 9.0), (1.5, 0.75), (0.2, 0.1)],
)
def test_delay_is_clipped_before_expiry(left: float, limit: float) -> None:
    for seed in range(50):
        decision = after_transient_failure(
            POLICY,
            attempts=7,  # ceiling 1920 s, far beyond what is left
            now=NOW,
            expires_at=NOW + timedelta(seconds=left),
            rng=random.Random(seed),
        )
        assert isinstance(decision, Reschedule)
        assert 0 < decision.delay_seconds <= limit < left


AWARE_ELSEWHERE = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    ("now", "expires_at", "expired"),
    [
        (NOW, None, False),
        (NOW, NOW, True),
        (NOW.replace(tzinfo=None), NOW + timedelta(seconds=1), False),  # naive now
        (NOW, NOW.replace(tzinfo=None) - timedelta(seconds=1), True),  # naive expiry
        (NOW.replace(tzinfo=None), NOW.replace(tzinfo=None), True),  # both naive
        # 14:00 at +02:00 is 12:00 UTC: the same instant as NOW.
        (NOW, datetime(2024, 5, 1, 14, 0, tzinfo=AWARE_ELSEWHERE), True),
        (NOW, datetime(2024, 5, 1, 14, 0, 1, tzinfo=AWARE_ELSEWHERE), False),
        (datetime(2024, 5, 1, 12, 0, 1), datetime(2024, 5, 1, 14, 0, tzinfo=AWARE_ELSEWHERE), True),
    ],
)
def test_is_expired_handles_naive_and_aware(
    now: datetime, expires_at: datetime | None, expired: bool
) -> None:
    assert is_expired(now, expires_at) is expired


def test_after_failure_mixes_naive_and_aware() -> None:
    decision = after_transient_failure(
        POLICY,
        attempts=7,
        now=NOW.replace(tzinfo=None),
        expires_at=(NOW + timedelta(seconds=10)).astimezone(AWARE_ELSEWHERE),
        rng=random.Random(0),
    )
    assert isinstance(decision, Reschedule)
    assert decision.delay_seconds <= 9.0


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"base_seconds": 0}, "MAILOUT_RETRY_BASE_SECONDS"),
        ({"base_seconds": -5}, "MAILOUT_RETRY_BASE_SECONDS"),
        ({"base_seconds": float("nan")}, "MAILOUT_RETRY_BASE_SECONDS"),
        ({"cap_seconds": 0}, "MAILOUT_RETRY_CAP_SECONDS"),
        ({"cap_seconds": float("inf")}, "MAILOUT_RETRY_CAP_SECONDS"),
        ({"cap_seconds": 10, "base_seconds": 30}, "MAILOUT_RETRY_CAP_SECONDS"),
        ({"factor": 0.5}, "MAILOUT_RETRY_FACTOR"),
        ({"factor": 0}, "MAILOUT_RETRY_FACTOR"),
        ({"factor": -2}, "MAILOUT_RETRY_FACTOR"),
        ({"max_attempts": 0}, "MAILOUT_MAX_ATTEMPTS"),
        ({"max_attempts": -1}, "MAILOUT_MAX_ATTEMPTS"),
        ({"max_attempts": 2.5}, "MAILOUT_MAX_ATTEMPTS"),
        ({"min_seconds": 0}, "MAILOUT_RETRY_MIN_SECONDS"),
        ({"min_seconds": 60}, "MAILOUT_RETRY_MIN_SECONDS"),
    ],
)
def test_bad_policies_name_the_setting(kwargs: dict[str, float], setting: str) -> None:
    with pytest.raises(ConfigError) as caught:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]  # deliberately wrong types too
    assert caught.value.setting == setting
    assert setting in str(caught.value)


def test_defaults_are_valid() -> None:
    assert RetryPolicy() == RetryPolicy(30.0, 2.0, 3600.0, 8, 1.0)
