"""When to try a message again, and when to give up. Pure functions, no I/O.

Backoff is exponential with *full jitter* (a uniform draw between 0 and the
exponential ceiling): after an outage, many messages that failed together spread
out instead of retrying in lockstep. The random source is passed in, so tests
are deterministic.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from mailout.exceptions import ConfigError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How transient failures are retried.

    Raises :class:`ConfigError`, naming the setting's environment variable, when a
    value is not finite, not positive, ``factor`` < 1, ``cap_seconds`` <
    ``base_seconds``, ``min_seconds`` > ``base_seconds`` or ``max_attempts`` < 1.
    """

    base_seconds: float = 30.0  # ceiling of the first delay
    factor: float = 2.0  # the ceiling grows by this much per attempt
    cap_seconds: float = 3600.0  # the ceiling never grows past this
    max_attempts: int = 8  # attempts in all, the first one included
    min_seconds: float = 1.0  # floor of every delay, so a retry never hot-loops

    def __post_init__(self) -> None:
        _require_positive("MAILOUT_RETRY_BASE_SECONDS", self.base_seconds)
        _require_positive("MAILOUT_RETRY_CAP_SECONDS", self.cap_seconds)
        _require_positive("MAILOUT_RETRY_MIN_SECONDS", self.min_seconds)
        if not _is_number(self.factor) or not math.isfinite(self.factor) or self.factor < 1:
            raise ConfigError("MAILOUT_RETRY_FACTOR", f"must be a number >= 1, got {self.factor!r}")
        if self.cap_seconds < self.base_seconds:
            raise ConfigError(
                "MAILOUT_RETRY_CAP_SECONDS",
                f"must be >= the base delay ({self.base_seconds}), got {self.cap_seconds}",
            )
        if self.min_seconds > self.base_seconds:
            raise ConfigError(
                "MAILOUT_RETRY_MIN_SECONDS",
                f"must be <= the base delay ({self.base_seconds}), got {self.min_seconds}",
            )
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError("MAILOUT_MAX_ATTEMPTS", f"must be an integer >= 1, got {attempts!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require_positive(setting: str, value: float) -> None:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise ConfigError(setting, f"must be a finite number > 0, got {value!r}")


def backoff_bounds(policy: RetryPolicy, attempts: int) -> tuple[float, float]:
    """The (low, high) range a delay is drawn from after ``attempts`` attempts.

    ``high`` is ``min(cap, base * factor ** (attempts - 1))``, computed without
    overflow for any attempt count; ``low`` is ``min_seconds``. Raises ValueError
    when ``attempts`` < 1 (there is nothing to back off from).
    """
    if attempts < 1:
        raise ValueError(f"attempts counts attempts made so far and must be >= 1, got {attempts}")
    steps = attempts - 1
    # Compare in log space: factor ** steps overflows a float long before a
    # runaway attempt counter stops growing.
    if policy.factor == 1 or steps * math.log(policy.factor) < math.log(
        policy.cap_seconds / policy.base_seconds
    ):
        high = min(policy.cap_seconds, policy.base_seconds * policy.factor**steps)
    else:
        high = policy.cap_seconds
    return policy.min_seconds, max(policy.min_seconds, high)


def backoff_delay(policy: RetryPolicy, attempts: int, rng: random.Random) -> float:
    """Seconds to wait after ``attempts`` attempts (1 after the first failure).

    Full jitter: uniform in [0, high], then raised to ``min_seconds``; see
    :func:`backoff_bounds`. Raises ValueError when ``attempts`` < 1.
    """
    low, high = backoff_bounds(policy, attempts)
    return max(low, rng.uniform(0.0, high))


@dataclass(frozen=True, slots=True)
class Reschedule:
    """Try again in ``delay_seconds``."""

    delay_seconds: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop retrying: the attempt limit was reached or the message expired."""

    reason: Literal["max_attempts", "expired"]


def after_transient_failure(
    policy: RetryPolicy,
    *,
    attempts: int,
    now: datetime,
    expires_at: datetime | None,
    rng: random.Random,
) -> Reschedule | GiveUp:
    """What to do after a transient failure, ``attempts`` attempts made so far.

    GiveUp("max_attempts") once ``attempts`` >= ``max_attempts``; GiveUp("expired")
    once ``now`` >= ``expires_at``; otherwise a jittered :func:`backoff_delay`.
    With an expiry, the delay is clipped so the retry lands *before* it (the
    message gets a last try): to at most ``min_seconds`` before the expiry, or
    halfway there when less than twice ``min_seconds`` is left, since a retry
    due exactly at the expiry would be expired by the time a worker claims it.
    Naive datetimes mean UTC. Raises ValueError when ``attempts`` < 1.
    """
    if attempts >= policy.max_attempts:
        return GiveUp("max_attempts")
    if is_expired(now, expires_at):
        return GiveUp("expired")
    delay = backoff_delay(policy, attempts, rng)
    if expires_at is not None:
        left = (_as_utc(expires_at) - _as_utc(now)).total_seconds()
        delay = min(delay, max(left - policy.min_seconds, left / 2))
    return Reschedule(delay)


def is_expired(now: datetime, expires_at: datetime | None) -> bool:
    """True when ``expires_at`` is set and ``now`` has reached it. Naive means UTC."""
    return expires_at is not None and _as_utc(now) >= _as_utc(expires_at)


def _as_utc(moment: datetime) -> datetime:
    # The database hands back naive UTC timestamps on some backends and aware ones
    # on others; comparing the two kinds directly raises TypeError.
    if moment.tzinfo is None or moment.utcoffset() is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
