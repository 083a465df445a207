"""The Django email backend: every ``send_mail()`` becomes an outbox row.

::

    EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"

Messages are written on Django's connection ``MAILOUT_DATABASE`` (``"default"``)
inside the caller's transaction: commit means queued, rollback means nothing was
queued, savepoints and ``ATOMIC_REQUESTS`` included. A worker
(``manage.py mailout worker``) sends them. ``send_messages`` returns how many
messages were queued (a message without recipients is skipped, as Django's SMTP
backend does).

With ``fail_silently``, a message mailout refuses (InvalidMessage: nothing was
written) is left out and counted as not sent; database errors always propagate,
since the caller's transaction is then broken anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend

from mailout.contrib.django.connection import borrowed_connection
from mailout.contrib.django.convert import to_message
from mailout.exceptions import InvalidMessage
from mailout.outbox import EnqueueSettings, Message, enqueue_many


class EmailBackend(BaseEmailBackend):
    """Queues Django's messages in mailout's outbox.

    Options (keyword arguments, e.g. from Django 6.1's ``MAILERS`` ``OPTIONS``):
    ``database`` (default ``settings.MAILOUT_DATABASE`` or ``"default"``) and
    ``queue`` (default ``settings.MAILOUT_QUEUE`` or ``"default"``).
    """

    def __init__(self, fail_silently: bool = False, *, database: str | None = None,
                 queue: str | None = None, **kwargs: Any) -> None:
        super().__init__(fail_silently=fail_silently, **kwargs)
        self.database = str(database or getattr(settings, "MAILOUT_DATABASE", "default"))
        self.queue = str(queue or getattr(settings, "MAILOUT_QUEUE", "default"))
        self.settings = EnqueueSettings.from_env()

    def send_messages(self, email_messages: Sequence[Any]) -> int:
        messages: list[Message] = []
        for email in email_messages:
            if not email.recipients():
                continue
            try:
                messages.append(to_message(email, queue=self.queue,
                                           charset=email.encoding or settings.DEFAULT_CHARSET))
            except InvalidMessage:
                if not self.fail_silently:
                    raise
        if not messages:
            return 0
        with borrowed_connection(self.database) as conn:
            if not self.fail_silently:
                return len(enqueue_many(conn, messages, settings=self.settings))
            return sum(self._one_by_one(conn, messages))

    def _one_by_one(self, conn: Any, messages: list[Message]) -> list[int]:
        """Each message alone, so that one refused message leaves the others queued."""
        queued = []
        for message in messages:
            try:
                enqueue_many(conn, [message], settings=self.settings)
            except InvalidMessage:
                queued.append(0)
            else:
                queued.append(1)
        return queued
