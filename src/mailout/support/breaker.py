"""A circuit breaker counted per probe cycle: stop using a thing that fails, probe, resume.

One implementation for every breaker mailout keeps: the worker's pause and outage
breakers (:mod:`mailout.worker.breaker`) and each failover member's
(:mod:`mailout.transports.members`).

A breaker opens on a failure. After a backoff it lets exactly one send through (the
*probe*). A probe that fails doubles the backoff, up to the cap; anything that shows
the thing works closes the breaker.

One failure is counted per probe cycle, not per send: sends that were already in
flight when the breaker opened fail the same way a moment later, and those are not
new evidence. Only the breaker's first failure and its probes' failures move the
backoff (a single bad-credentials event with 10 sends in flight is one backoff of the
base length). Sends are told apart by a token: a message id, or any number the user
of the breaker hands out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Trip:
    """A new probe cycle: the breaker opened, or its probe failed."""

    opened: bool  # True when the breaker was closed before this failure
    seconds: float  # until the next probe


@dataclass
class Breaker:
    """One breaker. ``base`` and ``cap`` bound the backoff between probes (seconds)."""

    base: float
    cap: float
    is_open: bool = False
    reason: str | None = None
    opened_at: float | None = None  # clock() when it opened, for logs and alerts
    failed_probes: int = 0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _until: float = 0.0  # clock() of the next probe
    _current: float = 0.0
    _probe: int | None = None  # the token of the probe out now

    def _now(self) -> float:
        return self.clock()

    def fail(self, reason: str, token: int) -> Trip | None:
        """A send (``token``) failed this breaker's way.

        Returns the new cycle when this failure counts (the breaker opens, or its
        probe failed), else None: a send already in flight when it opened.
        """
        if not self.is_open:
            self.is_open, self.reason, self.opened_at = True, reason, self._now()
            self.failed_probes, self._probe = 0, None
            return self._schedule(self.base, opened=True)
        if token != self._probe:
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
        """The thing answered: close. Returns True if the breaker was open."""
        was = self.is_open
        self.is_open, self.reason, self.opened_at = False, None, None
        self.failed_probes, self._current, self._probe = 0, 0.0, None
        return was

    def probe_started(self, token: int) -> bool:
        """``token`` goes out while open: it becomes the probe, whose result decides
        this cycle, if a probe is due (True). A send picked before the breaker opened
        is not one (False): taken as the probe, it would go out moments after the
        failure that opened the breaker and, failing as well, double the backoff
        before any backoff had passed."""
        if not self.probe_due:
            return False
        self._probe = token
        return True

    def probe_inconclusive(self, token: int) -> None:
        """The probe ended without an answer either way (a render error, a guard, its
        age limit, a cancelled send): let the next send probe at once."""
        if self._probe == token:
            self._probe = None

    @property
    def probe_due(self) -> bool:
        """Open, its backoff over, and no probe out: the next send may probe."""
        return self.is_open and self._probe is None and self._now() >= self._until

    def admit(self, token: int) -> bool:
        """May send ``token`` go through now? Always while closed; while open, only as
        the probe (and then it is the probe)."""
        return not self.is_open or self.probe_started(token)

    def capacity(self, free: int, in_flight: int) -> int:
        """How many sends may start now, given ``free`` slots and ``in_flight`` sends
        (the worker's claims: a probe only once the sends from before have ended)."""
        if not self.is_open:
            return free
        if not self.probe_due:
            return 0
        return min(free, 1) if in_flight == 0 else 0

    def seconds_left(self) -> float:
        """Until the next probe may start; 0 when closed or due."""
        return max(0.0, self._until - self._now()) if self.is_open else 0.0

    def open_for(self) -> float:
        """Seconds since the breaker opened; 0 when closed."""
        return self._now() - self.opened_at if self.opened_at is not None else 0.0
