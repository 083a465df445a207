"""A token bucket, for per-queue send rates. Pure: the clock is passed in."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """Allows ``rate`` events per second on average, with bursts of up to ``burst``.

    The bucket starts full. ``take(n)`` returns how many of ``n`` may go now.
    """

    def __init__(self, rate: float, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self, wanted: int) -> int:
        """Take up to ``wanted`` whole tokens; returns how many were taken."""
        self._refill()
        granted = min(wanted, int(self._tokens))
        self._tokens -= granted
        return granted

    def give_back(self, count: int) -> None:
        """Return tokens taken for messages that were not claimed after all."""
        self._tokens = min(self.burst, self._tokens + count)

    def wait_time(self) -> float:
        """Seconds until at least one token is available."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate
