"""Lanes and per-queue policies: parsing and validation. Pure, no I/O.

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

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mailout.exceptions import ConfigError
from mailout.retry import RetryPolicy

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    queues: tuple[str, ...]
    concurrency: int


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How one queue's messages are retried, aged and paced."""

    retry: RetryPolicy
    max_age_seconds: float
    rate_per_second: float | None = None  # None: as fast as the lane allows


# Sensible defaults for the conventional queues: a login code older than 15 minutes
# is useless and better dead (with an alert); bulk mail may wait three days.
DEFAULT_MAX_AGE = {"critical": 15 * 60.0, "bulk": 3 * 86400.0}


def parse_lanes(spec: str, setting: str = "MAILOUT_LANES") -> list[Lane]:
    """Parse a lane spec; raise ConfigError naming ``setting`` with what is wrong."""
    lanes: list[Lane] = []
    seen_queues: set[str] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            raise ConfigError(setting, f"empty lane in {spec!r}")
        head, sep, count = part.rpartition(":")
        if not sep:
            raise ConfigError(setting, f"lane {part!r} needs a concurrency, like {part}:4")
        name, eq, queue_list = head.partition("=")
        queues = tuple(q.strip() for q in queue_list.split("+")) if eq else (name,)
        for q in (name, *queues):
            if not _NAME.fullmatch(q):
                raise ConfigError(setting, f"{q!r} is not a valid lane or queue name")
        if not count.isdigit() or int(count) < 1:
            raise ConfigError(setting, f"lane {name!r}: concurrency must be a whole number "
                              f"of at least 1, got {count!r}")
        if any(lane.name == name for lane in lanes):
            raise ConfigError(setting, f"lane {name!r} is given twice")
        overlap = seen_queues & set(queues)
        if overlap:
            raise ConfigError(setting, f"queue {sorted(overlap)[0]!r} is in two lanes")
        seen_queues |= set(queues)
        lanes.append(Lane(name, queues, int(count)))
    return lanes


def parse_duration(text: str, setting: str) -> float:
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ConfigError(setting, f"{text!r} is not a duration like 30s, 15m, 2h or 3d")
    return float(match.group(1)) * _UNIT[match.group(2)]


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
            policy = replace(policy, max_age_seconds=parse_duration(value, where))
        elif key == "rate":
            policy = replace(policy, rate_per_second=_positive(value, where, key))
        elif key == "max_attempts":
            if not value.strip().isdigit() or int(value) < 1:
                raise ConfigError(where, f"max_attempts must be a whole number >= 1: {value!r}")
            retry["max_attempts"] = int(value)
        elif key in ("retry_base", "retry_cap"):
            field = "base_seconds" if key == "retry_base" else "cap_seconds"
            retry[field] = parse_duration(value, where)
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


def _positive(value: str, where: str, key: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(where, f"{key} must be a number, got {value!r}") from None
    if not number > 0:
        raise ConfigError(where, f"{key} must be positive, got {value!r}")
    return number
