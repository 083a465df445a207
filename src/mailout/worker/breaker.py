"""The transport breakers: stop sending while the transport cannot work, probe, resume.

Two breakers, with the same mechanics and different meanings:

* the **pause** breaker opens on a configuration error (bad credentials, a TLS
  mismatch, a relay that answers AUTH with nonsense): someone must fix a setting;
* the **outage** breaker opens when the provider is unreachable or refuses everyone
  (connection refused, DNS, a 421 greeting, 4yz to MAIL FROM): it will come back.

Either way the message goes back to ``pending`` uncharged, and an open breaker
stops the worker claiming. After a backoff it lets exactly one message through (the
*probe*). A probe that fails the same way doubles the backoff, up to the cap; a
probe the transport answered past the connection (any decision other than PAUSE
or OUTAGE) closes the breaker.

One failure is counted per probe cycle, not per send: sends that were already in
flight when the breaker opened fail the same way a moment later, and those are not
new evidence. Only the breaker's first failure and its probes' failures move the
backoff (a single bad-credentials event with 10 sends in flight is one pause of the
base length).

Not to be confused with operator pauses (``mailout pause``), which an operator sets
per queue or template and which live in the database.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Kind(enum.StrEnum):
    """Why a breaker is open."""

    PAUSE = "pause"  # a configuration error: fix a setting
    OUTAGE = "outage"  # the provider is unreachable or refuses everyone


@dataclass(frozen=True, slots=True)
class Trip:
    """A new probe cycle: the breaker opened, or its probe failed."""

    opened: bool  # True when the breaker was closed before this failure
    seconds: float  # until the next probe


@dataclass
class Breaker:
    """One breaker. ``base`` and ``cap`` bound the backoff between probes (seconds)."""

    kind: Kind
    base: float
    cap: float
    is_open: bool = False
    reason: str | None = None
    opened_at: float | None = None  # clock() when it opened, for logs and alerts
    failed_probes: int = 0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _until: float = 0.0  # clock() of the next probe
    _current: float = 0.0
    _probe: int | None = None  # the message id of the probe out now

    def _now(self) -> float:
        return self.clock()

    def fail(self, reason: str, message_id: int) -> Trip | None:
        """A send of ``message_id`` failed this breaker's way.

        Returns the new cycle when this failure counts (the breaker opens, or its
        probe failed), else None: a send already in flight when it opened.
        """
        if not self.is_open:
            self.is_open, self.reason, self.opened_at = True, reason, self._now()
            self.failed_probes, self._probe = 0, None
            return self._schedule(self.base, opened=True)
        if message_id != self._probe:
            return None
        self._probe = None
        self.reason = reason
        self.failed_probes += 1
        return self._schedule(min(self._current * 2, self.cap), opened=False)

    def _schedule(self, seconds: float, *, opened: bool) -> Trip:
        self._current = seconds
        self._until = self._now() + seconds
        return Trip(opened, seconds)

    def close(self) -> bool:
        """The transport answered: close. Returns True if the breaker was open."""
        was = self.is_open
        self.is_open, self.reason, self.opened_at = False, None, None
        self.failed_probes, self._current, self._probe = 0, 0.0, None
        return was

    def probe_started(self, message_id: int) -> None:
        """``message_id`` was claimed while open: its result decides this cycle."""
        if self.is_open and self._probe is None:
            self._probe = message_id

    def probe_inconclusive(self, message_id: int) -> None:
        """The probe ended without talking to the transport (a render error, a guard,
        its age limit): let the next message probe at once."""
        if self._probe == message_id:
            self._probe = None

    def capacity(self, free: int, in_flight: int) -> int:
        """How many messages may be claimed now, given ``free`` slots."""
        if not self.is_open:
            return free
        if self._probe is not None or self._now() < self._until:
            return 0
        return min(free, 1) if in_flight == 0 else 0  # one probe, once the others ended

    def seconds_left(self) -> float:
        return max(0.0, self._until - self._now()) if self.is_open else 0.0

    def open_for(self) -> float:
        """Seconds since the breaker opened; 0 when closed."""
        return self._now() - self.opened_at if self.opened_at is not None else 0.0


class Breakers:
    """The pause and outage breakers of one worker process, claimed against together."""

    def __init__(self, pause_seconds: float, pause_cap: float, outage_seconds: float,
                 outage_cap: float) -> None:
        self.pause = Breaker(Kind.PAUSE, pause_seconds, pause_cap)
        self.outage = Breaker(Kind.OUTAGE, outage_seconds, outage_cap)

    @property
    def both(self) -> tuple[Breaker, Breaker]:
        return (self.pause, self.outage)

    @property
    def paused(self) -> bool:
        """True while either breaker is open (claims are probes only)."""
        return self.pause.is_open or self.outage.is_open

    def capacity(self, free: int, in_flight: int) -> int:
        return min(b.capacity(free, in_flight) for b in self.both)

    def probe_started(self, message_id: int) -> None:
        for b in self.both:
            b.probe_started(message_id)

    def probe_inconclusive(self, message_id: int) -> None:
        for b in self.both:
            b.probe_inconclusive(message_id)

    def seconds_left(self) -> float:
        return max(b.seconds_left() for b in self.both)
