"""Operator pauses (``mailout pause``) as a worker sees them: re-read every few seconds.

Operators pause a queue or a template in the database; every worker picks the
change up within :attr:`PauseCache.TTL` seconds. Not to be confused with the
transport breaker (:mod:`mailout.worker.breaker`), which the worker opens itself.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy import Connection

from mailout.db import pauses


@dataclass(frozen=True, slots=True)
class Paused:
    queues: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()


class PauseCache:
    """Operator pauses (``mailout pause``), re-read from the database every few seconds."""

    TTL = 2.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._value = Paused()

    def current(self, conn: Connection) -> Paused:
        with self._lock:
            if time.monotonic() - self._read_at >= self.TTL:
                rows = pauses.list_pauses(conn)
                self._value = Paused(
                    tuple(r["name"] for r in rows if r["kind"] == "queue"),
                    tuple(r["name"] for r in rows if r["kind"] == "template"),
                )
                self._read_at = time.monotonic()
            return self._value
