"""Retry, age and pacing policy, lanes, and the one duration grammar. Pure, no I/O.

**Retries.** When to try a message again, and when to give up. Pure functions, no I/O.

Backoff is exponential with *full jitter* (a uniform draw between 0 and the
exponential ceiling): after an outage, many messages that failed together spread
out instead of retrying in lockstep. The random source is passed in, so tests
are deterministic.

**Lanes and queue policies.** Lanes and per-queue policies: parsing and validation. Pure, no I/O.

A *lane* is a slice of a worker with its own concurrency slots and SMTP connections
that claims only from its own queues, so a bulk backlog can never occupy capacity
reserved for login codes. Inside a lane, ``priority`` orders claims; strict priority
alone could starve low priorities forever under load, which is why lanes exist.

Lane spec (``--lanes`` / ``MAILOUT_LANES``)::

    critical:4,default:8,bulk:2          a lane per queue, named after it
    urgent=critical+login:4,default:8    a lane serving several queues

Queue policy spec (``MAILOUT_QUEUE_POLICIES``)::

    critical:max_age=15m,max_attempts=5;bulk:max_age=3d,rate=50,retry_base=2m

Durations take s, m, h or d (plain numbers are seconds); ``rate`` is messages per
second per worker process.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from mailout.exceptions import ConfigError
from mailout.support import envparse
from mailout.support.timeutil import aware


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

    reason: Literal["max_attempts", "max_age"]


def after_transient_failure(
    policy: RetryPolicy,
    *,
    attempts: int,
    now: datetime,
    expires_at: datetime | None,
    rng: random.Random,
) -> Reschedule | GiveUp:
    """What to do after a transient failure, ``attempts`` attempts made so far.

    GiveUp("max_attempts") once ``attempts`` >= ``max_attempts``; GiveUp("max_age")
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
        return GiveUp("max_age")
    delay = backoff_delay(policy, attempts, rng)
    if expires_at is not None:
        left = (aware(expires_at) - aware(now)).total_seconds()
        delay = min(delay, max(left - policy.min_seconds, left / 2))
    return Reschedule(delay)


def is_expired(now: datetime, expires_at: datetime | None) -> bool:
    """True when ``expires_at`` is set and ``now`` has reached it. Naive means UTC."""
    return expires_at is not None and aware(now) >= aware(expires_at)


_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    queues: tuple[str, ...]
    concurrency: int
    # Worker processes of its own (``critical:4@1``): this lane runs alone in that many
    # processes, so no other lane's rendering shares its event loop. None: it runs in
    # the shared processes, together with the other unpinned lanes.
    processes: int | None = None

    @property
    def spec(self) -> str:
        """This lane as a MAILOUT_LANES entry, without the processes (``a=b+c:4``)."""
        head = self.name if self.queues == (self.name,) else f"{self.name}={'+'.join(self.queues)}"
        return f"{head}:{self.concurrency}"


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How one queue's messages are retried, aged and paced."""

    retry: RetryPolicy
    max_age_seconds: float
    rate_per_second: float | None = None  # None: as fast as the lane allows


# Sensible defaults for the conventional queues: a login code older than 15 minutes
# is useless and better dead (with an alert); bulk mail may wait three days.
# The longest age limit a message may have: beyond it a number is a mistake (and
# infinity or 1e300 do not fit the databases' timestamps).
MAX_AGE_SECONDS = 10 * 366 * 86400.0
DEFAULT_MAX_AGE = {"critical": 15 * 60.0, "bulk": 3 * 86400.0}


def parse_lanes(spec: str, setting: str = "MAILOUT_LANES") -> list[Lane]:
    """Parse a lane spec; raise ConfigError naming ``setting`` with what is wrong.

    ``name[=queue+queue]:concurrency[@processes]``, comma-separated; ``@processes``
    pins the lane to that many worker processes of its own (see :class:`Lane`).
    """
    lanes: list[Lane] = []
    seen_queues: set[str] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            raise ConfigError(setting, f"empty lane in {spec!r}")
        head, sep, count = part.rpartition(":")
        if not sep:
            raise ConfigError(setting, f"lane {part!r} needs a concurrency, like {part}:4")
        count, at, own = count.partition("@")
        name, eq, queue_list = head.partition("=")
        queues = tuple(q.strip() for q in queue_list.split("+")) if eq else (name,)
        for q in (name, *queues):
            if not _NAME.fullmatch(q):
                raise ConfigError(setting, f"{q!r} is not a valid lane or queue name")
        if not count.isdigit() or int(count) < 1:
            raise ConfigError(setting, f"lane {name!r}: concurrency must be a whole number "
                              f"of at least 1, got {count!r}")
        if at and (not own.isdigit() or int(own) < 1):
            raise ConfigError(setting, f"lane {name!r}: processes after @ must be a whole "
                              f"number of at least 1, got {own!r}")
        if any(lane.name == name for lane in lanes):
            raise ConfigError(setting, f"lane {name!r} is given twice")
        overlap = seen_queues & set(queues)
        if overlap:
            raise ConfigError(setting, f"queue {sorted(overlap)[0]!r} is in two lanes")
        seen_queues |= set(queues)
        lanes.append(Lane(name, queues, int(count), int(own) if at else None))
    return lanes


def duration_seconds(text: str, *, bare_seconds: bool) -> float:
    """The one duration grammar: ``45s``, ``15m``, ``12h``, ``30d``, ``2w`` or a sum
    such as ``1h30m`` (any case, surrounding space ignored), in seconds.

    A bare number means seconds where ``bare_seconds`` allows it (settings, where
    that is the documented unit) and is refused elsewhere (the CLI's ``--older-than``:
    "30" could mean seconds or days, and guessing wrong there deletes data).
    Raises ValueError saying which forms are accepted.
    """
    raw = text.strip().lower()
    if bare_seconds and _BARE_NUMBER.fullmatch(raw):
        return float(raw)
    parts = _DURATION_PART.findall(raw)
    if not raw or "".join(n + u for n, u in parts) != raw:
        raise ValueError(f"{text!r} is not a duration: use e.g. 45s, 15m, 12h, 30d or 1h30m")
    return float(sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))


def setting_seconds(text: str, setting: str) -> float:
    """A duration setting in seconds (bare numbers are seconds); ConfigError naming it."""
    try:
        seconds = duration_seconds(text, bare_seconds=True)
    except ValueError as exc:
        raise ConfigError(setting, str(exc)) from None
    if not 0 < seconds <= envparse.MAX_SECONDS:
        raise ConfigError(setting, f"{text.strip()!r} must be more than 0 and at most "
                          f"{envparse.MAX_SECONDS:g} seconds (100 years)")
    return seconds


def _max_age(text: str, setting: str) -> float:
    seconds = setting_seconds(text, setting)
    if seconds > MAX_AGE_SECONDS:
        raise ConfigError(setting, f"max_age {text.strip()!r} is more than "
                          f"{MAX_AGE_SECONDS:.0f} seconds (ten years)")
    return seconds


def parse_queue_policies(
    spec: str, default: QueuePolicy, setting: str = "MAILOUT_QUEUE_POLICIES"
) -> dict[str, QueuePolicy]:
    """Per-queue overrides of ``default``; queues not named get ``policy_for``'s defaults."""
    policies: dict[str, QueuePolicy] = {}
    for part in (p.strip() for p in spec.split(";") if p.strip()):
        queue, sep, body = part.partition(":")
        queue = queue.strip()
        if not sep or not _NAME.fullmatch(queue):
            raise ConfigError(setting, f"{part!r} should look like queue:key=value,...")
        policies[queue] = _apply(policy_for(queue, default, {}), body, f"{setting} ({queue})")
    return policies


def policy_for(
    queue: str, default: QueuePolicy, overrides: Mapping[str, QueuePolicy]
) -> QueuePolicy:
    """The policy of ``queue``: its override, else the defaults (with DEFAULT_MAX_AGE)."""
    if queue in overrides:
        return overrides[queue]
    if queue in DEFAULT_MAX_AGE:
        return replace(default, max_age_seconds=DEFAULT_MAX_AGE[queue])
    return default


def _apply(policy: QueuePolicy, body: str, where: str) -> QueuePolicy:
    r = policy.retry
    retry = {"base_seconds": r.base_seconds, "factor": r.factor, "cap_seconds": r.cap_seconds,
             "max_attempts": r.max_attempts}
    for item in (i.strip() for i in body.split(",") if i.strip()):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ConfigError(where, f"{item!r} should be key=value")
        if key == "max_age":
            policy = replace(policy, max_age_seconds=_max_age(value, where))
        elif key == "rate":
            policy = replace(policy, rate_per_second=_parsed(_RATE, value, where, key))
        elif key == "max_attempts":
            retry["max_attempts"] = _parsed(_ATTEMPTS, value, where, key)
        elif key in ("retry_base", "retry_cap"):
            field = "base_seconds" if key == "retry_base" else "cap_seconds"
            retry[field] = setting_seconds(value, where)
        else:
            raise ConfigError(where, f"unknown setting {key!r} (max_age, max_attempts, "
                              "retry_base, retry_cap, rate)")
    try:
        built = RetryPolicy(
            base_seconds=float(retry["base_seconds"]), factor=float(retry["factor"]),
            cap_seconds=float(retry["cap_seconds"]), max_attempts=int(retry["max_attempts"]),
            min_seconds=min(1.0, float(retry["base_seconds"])),
        )
    except ConfigError as exc:
        raise ConfigError(where, exc.reason) from None
    return replace(policy, retry=built)


_RATE = envparse.number(float, minimum=0, strict=True)
_ATTEMPTS = envparse.number(int, minimum=1)


def _parsed(parse: envparse.Parser, value: str, where: str, key: str) -> Any:
    """``value`` read by ``parse`` (envparse's rules and wording, as every numeric
    setting), a ConfigError naming the policy setting and the key."""
    try:
        return parse(key, value.strip())
    except ConfigError as exc:
        raise ConfigError(where, f"{key} {exc.reason}") from None
