"""Wake-ups sent after the caller's commit, outside its transaction (PostgreSQL).

A transaction that NOTIFYs takes a lock on the whole instance at commit, held
through its WAL flush, so that notifications queue in commit order: commits that
notify go one at a time and group commit is lost (issue 38; docs/capacity.md has the
figures). So by default enqueue sends nothing in the caller's transaction. It notes
the new rows' ids on the caller's connection, and they go to this process's
:class:`Waker` once that transaction is over:

- a SQLAlchemy connection: when it goes back to its pool (the end of
  ``engine.begin()``, of a ``Session``'s commit or rollback, of ``engine.connect()``);
  a connection kept open past its commit wakes workers when it is closed, and the
  lanes' poll finds the row meanwhile;
- a connection borrowed from Django (:mod:`mailout.contrib.django.connection`): from
  Django's ``transaction.on_commit``, which a rollback discards.

The waker's thread sends at most one statement per :data:`WINDOW`, in autocommit on
a connection of its own (from the caller's pool; an asyncio or Django caller's
database gets a small synchronous engine): a NOTIFY for the queues of those ids that
are visible. A
rolled-back row never is, so a rollback wakes no one; a NOTIFY that is late or lost
costs the lanes' poll interval at most (``MAILOUT_POLL_SECONDS``), never a message.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.pool import Pool

from mailout.db import pooler
from mailout.db.inserts import NOTIFY_CHANNEL
from mailout.db.schema import messages

log = logging.getLogger(__name__)

# At most one NOTIFY transaction per window per process: each takes the instance-wide
# lock at its commit, so they are kept few; 10 ms adds little to a wake-up.
WINDOW = 0.01
EXIT_WAIT = 2.0  # seconds an exiting process waits for its last wake-ups
_PENDING = "mailout_wake_ids"  # key in the pool record's info: (target engine, ids)

# The queues of the rows among :ids that this (autocommit) statement can see. Its
# transaction commits without waiting for its WAL flush (synchronous_commit, for this
# transaction only): it writes nothing worth keeping, and the notify lock is then
# held for the commit alone, not through a flush.
_WAKE = text(f"""
WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
SELECT pg_notify('{NOTIFY_CHANNEL}', q.queue)
FROM unflushed,
    (SELECT DISTINCT queue FROM {messages.name} WHERE id = ANY(CAST(:ids AS bigint[]))) AS q
""")  # noqa: S608 - only module constants are interpolated; the ids are bound


@dataclass(frozen=True, slots=True)
class Owner:
    """The owner of a borrowed connection's transaction, which knows when it commits."""

    # Runs a callable once the owner's transaction commits (never on rollback).
    on_commit: Callable[[Callable[[], None]], None]
    engine: Callable[[], Engine]  # where the waker sends the NOTIFY from


_OWNER: ContextVar[Owner | None] = ContextVar("mailout_transaction_owner", default=None)


@contextlib.contextmanager
def owned_by(owner: Owner) -> Iterator[None]:
    """Enqueues inside this block wake workers through ``owner.on_commit``."""
    token = _OWNER.set(owner)
    try:
        yield
    finally:
        _OWNER.reset(token)


class Waker:
    """One thread per process that sends the wake-ups, coalesced per :data:`WINDOW`."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self.sent = 0  # wake statements sent (tests and bench/commit_tax.py read it)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._pending: dict[Engine, set[int]] = {}
        self._sending = False
        self._thread: threading.Thread | None = None
        self._last = 0.0

    def submit(self, engine: Engine, ids: Iterable[int]) -> None:
        """Wake the workers of the queues of ``ids`` (those committed) from ``engine``."""
        if self._pid != os.getpid():
            self._reset()  # a forked child: the parent's thread is not here
        with self._cond:
            self._pending.setdefault(engine, set()).update(ids)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mailout-waker",
                                                daemon=True)
                self._thread.start()
                # A script that enqueues and exits at once still wakes the workers.
                atexit.register(self.flush)
            self._cond.notify_all()

    def flush(self, timeout: float = EXIT_WAIT) -> bool:
        """Wait until every wake-up submitted so far is sent (or has failed); False
        when ``timeout`` seconds passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._sending:
                left = deadline - time.monotonic()
                if left <= 0 or self._pid != os.getpid():
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
            # The rest of the window: wake-ups committed meanwhile join this one.
            time.sleep(max(0.0, self._last + self.window - time.monotonic()))
            with self._cond:
                batch, self._pending = self._pending, {}
                self._sending = True
            self._last = time.monotonic()
            try:
                for engine, ids in batch.items():
                    self._send(engine, ids)
            finally:
                with self._cond:
                    self._sending = False
                    self._cond.notify_all()

    def _send(self, engine: Engine, ids: set[int]) -> None:
        try:
            with engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.execute(_WAKE, {"ids": sorted(ids)})
            self.sent += 1
        except Exception as exc:  # a background thread must not die of one failure
            log.warning("could not wake workers, they find new mail by polling: %s",
                        type(exc).__name__,
                        extra={"event": "wake_failed", "error": type(exc).__name__})


WAKER = Waker()
_HOOKED: weakref.WeakSet[Pool] = weakref.WeakSet()  # pools with our checkin listener
_DERIVED: dict[str, Engine] = {}  # synchronous engines for asyncio callers, by URL
_LOCK = threading.Lock()


def after_commit(conn: Connection, ids: Iterable[int]) -> None:
    """Wake workers for the rows ``ids`` once ``conn``'s transaction has committed."""
    owner = _OWNER.get()
    if owner is not None:
        wanted = list(ids)
        owner.on_commit(lambda: WAKER.submit(owner.engine(), wanted))
        return
    pool = conn.engine.pool
    if pool not in _HOOKED:
        with _LOCK:
            if pool not in _HOOKED:
                event.listen(pool, "checkin", _checked_in)
                _HOOKED.add(pool)
    info = conn.info
    pending = info.get(_PENDING)
    if pending is None:
        info[_PENDING] = (_target(conn.engine), set(ids))
    else:
        pending[1].update(ids)


def _checked_in(dbapi_connection: Any, record: Any) -> None:
    """The pool took the connection back: its transaction is over, one way or the other."""
    pending = record.info.pop(_PENDING, None) if record is not None else None
    if pending is not None:
        WAKER.submit(*pending)


def _target(engine: Engine) -> Engine:
    """The engine the waker's thread connects with: the caller's own, or for an
    asyncio engine (which needs the caller's event loop) a synchronous one to the
    same database."""
    if not engine.dialect.is_async:
        return engine
    url = engine.url.set(drivername="postgresql+psycopg")
    key = url.render_as_string(hide_password=False)
    with _LOCK:
        derived = _DERIVED.get(key)
        if derived is None:
            derived = _DERIVED[key] = create_engine(url, **pooler.engine_kwargs(
                url, {"pool_size": 1, "max_overflow": 1, "pool_pre_ping": True}))
    return derived
