"""The transport breaker: stops sending after a configuration error.

Bad credentials or a broken TLS setup fail every message the same way; sending on
would turn the whole queue into failures. The breaker opens for a pause that doubles
on each consecutive configuration error, then lets one probe message through. A
probe that gets any answer other than a configuration error closes it again.

Not to be confused with operator pauses (``mailout pause``), which an operator sets
per queue or template and which live in the database.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Breaker:
    pause_seconds: float
    pause_cap: float
    _paused_until: float = 0.0
    _current: float = 0.0
    paused: bool = False  # closed, or open for a single probe
    reason: str | None = None

    def _now(self) -> float:
        return time.monotonic()

    def pause(self, reason: str) -> tuple[bool, float]:
        """Open the breaker (stop sending). Returns (newly paused, pause length in seconds)."""
        newly = not self.paused
        self._current = self.pause_seconds if newly else min(self._current * 2, self.pause_cap)
        self._paused_until = self._now() + self._current
        self.paused = True
        self.reason = reason
        return newly, self._current

    def resume(self) -> bool:
        """Close the breaker after a good probe. Returns True if it was paused."""
        was = self.paused
        self.paused = False
        self.reason = None
        self._current = 0.0
        return was

    def capacity(self, free: int, in_flight: int) -> int:
        """How many messages may be claimed now, given ``free`` slots."""
        if not self.paused:
            return free
        if self._now() < self._paused_until:
            return 0
        return 1 if in_flight == 0 else 0  # one probe at a time

    def seconds_left(self) -> float:
        return max(0.0, self._paused_until - self._now()) if self.paused else 0.0
