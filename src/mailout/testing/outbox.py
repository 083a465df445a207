"""``Outbox``: what a test enqueued, and the messages a worker makes of it.

In the spirit of Django's ``mail.outbox``, ActionMailer's ``assert_enqueued_emails``
and Laravel's ``Mail::fake``, except that nothing is faked: the rows are the real
outbox rows, and ``deliver_all`` runs mailout's real worker (claims, rendering,
attachments, guards, retries) in this process, sending to a
:class:`~mailout.transports.memory.MemoryTransport` instead of a server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from mailout.db.schema import messages
from mailout.message.envelope import Envelope
from mailout.transports.memory import MemoryTransport
from mailout.worker import config
from mailout.worker.build import build_worker

DEFAULT_MAIL_FROM = "Tests <tests@example.com>"
Connect = Callable[[], AbstractContextManager[Connection]]


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """One outbox row as a test sees it."""

    id: int
    key: str
    status: str
    queue: str
    to: tuple[str, ...]  # the To addresses (bare, lower case as stored)
    template: str | None
    params: Mapping[str, Any] | None
    subject: str | None  # None for a templated message: it is rendered at send time


class Outbox:
    """The outbox of one test database.

    ``connect`` opens a connection that sees the test's rows (for Django: Django's own,
    so rows of a test still inside its transaction are seen); ``database_url`` is what
    the worker of :meth:`deliver_all` opens, so it sees committed rows only.
    """

    def __init__(self, connect: Connect, database_url: str | None, *,
                 mail_from: str = DEFAULT_MAIL_FROM, templates_dir: Path | str | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self._connect = connect
        self.database_url = database_url
        self.mail_from = mail_from
        self.templates_dir = templates_dir
        self.env = dict(env or {})
        self.transport = MemoryTransport()  # script failures on it: outbox.transport.script(...)

    def queued(self) -> list[QueuedMessage]:
        """Every row, oldest first, whatever its status."""
        cols = (messages.c.id, messages.c.idempotency_key, messages.c.status, messages.c.queue,
                messages.c.recipient, messages.c.addresses, messages.c.template,
                messages.c.params, messages.c.subject)
        with self._connect() as conn:
            rows = conn.execute(select(*cols).order_by(messages.c.id)).all()
        return [QueuedMessage(r.id, r.idempotency_key, r.status, r.queue, _to_of(r),
                              r.template, r.params, r.subject) for r in rows]

    def assert_enqueued(self, *, to: str | None = None, template: str | None = None,
                        subject: str | None = None, queue: str | None = None,
                        key: str | None = None, count: int | None = None) -> list[QueuedMessage]:
        """The rows matching every criterion given; AssertionError, listing what was
        queued, unless there are exactly ``count`` of them (``None``: at least one)."""
        found = [m for m in self.queued()
                 if (to is None or to.lower() in m.to)
                 and (template is None or m.template == template)
                 and (subject is None or m.subject == subject)
                 and (queue is None or m.queue == queue)
                 and (key is None or m.key == key)]
        if (len(found) != count) if count is not None else not found:
            wanted = ", ".join(f"{k}={v!r}" for k, v in (("to", to), ("template", template),
                               ("subject", subject), ("queue", queue), ("key", key)) if v)
            queued = "\n".join(f"  #{m.id} to={','.join(m.to)} template={m.template} "
                               f"subject={m.subject!r} queue={m.queue} key={m.key}"
                               for m in self.queued()) or "  (nothing)"
            expected = "at least 1" if count is None else str(count)
            raise AssertionError(f"expected {expected} message(s) with {wanted or 'any'}, "
                                 f"found {len(found)}; queued:\n{queued}")
        return found

    def deliver_all(self) -> list[Envelope]:
        """Run a worker in this process until nothing is due; the rendered messages it
        sent, in order. From async code, ``await deliver_all_async()``."""
        url = self._worker_database_url()
        return asyncio.run(self._deliver(url))

    async def deliver_all_async(self) -> list[Envelope]:
        return await self._deliver(self._worker_database_url())

    def _worker_database_url(self) -> str:
        """The database the worker opens (a subclass may check the caller first)."""
        if self.database_url is None:
            raise RuntimeError("this outbox has no database URL for a worker to open")
        return self.database_url

    async def _deliver(self, database_url: str) -> list[Envelope]:
        before = len(self.transport.outbox)
        settings = config.load(env=self._worker_env(database_url))
        transport = self.transport
        worker = build_worker(settings, transport_factory=lambda: transport, until_idle=True)
        try:
            await worker.run()
        finally:
            worker.alerts.close()
            worker.engine.dispose()
        return list(self.transport.outbox[before:])

    def _worker_env(self, database_url: str) -> dict[str, str]:
        env = {"MAILOUT_DATABASE_URL": database_url, "MAIL_FROM": self.mail_from,
               "MAILOUT_TRANSPORT": "memory://", "MAILOUT_LISTEN": "0",
               "MAILOUT_POLL_SECONDS": "0.05", "MAILOUT_RETRY_BASE_SECONDS": "0.05",
               "MAILOUT_RETRY_CAP_SECONDS": "0.05"}
        if self.templates_dir is not None:
            env["MAILOUT_TEMPLATES"] = str(self.templates_dir)
        return {**env, **self.env}


def _to_of(row: Any) -> tuple[str, ...]:
    if row.addresses and row.addresses.get("to"):
        return tuple(address.lower() for _, address in row.addresses["to"])
    return (row.recipient.lower(),)
