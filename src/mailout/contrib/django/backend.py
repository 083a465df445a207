"""The Django email backend: every ``send_mail()`` becomes an outbox row.

::

    EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"

Messages are written on Django's connection ``MAILOUT_DATABASE`` (``"default"``)
inside the caller's transaction: commit means queued, rollback means nothing was
queued, savepoints and ``ATOMIC_REQUESTS`` included. A worker
(``manage.py mailout worker``) sends them. Each is stored as the bytes Django built
(see :mod:`mailout.contrib.django.convert`), which the SMTP transport sends as they
are. ``send_messages`` returns how many messages were queued (a message without
recipients is skipped, as Django's SMTP backend does); the messages of one call go
out in call order (``enqueue_many(in_order=True)``).

A message mailout refuses raises :class:`~mailout.exceptions.InvalidMessage`
(nothing of the call is written). With ``fail_silently`` (Django's ``mail_admins``
uses it) the refused message alone is left out and never silently: it is logged at
ERROR (the field and the error's type; no address or content) and counted in
``mailout_django_refused_total``. Database errors always propagate, since the
caller's transaction is then broken anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend
from prometheus_client import Counter

from mailout.contrib.django.connection import borrowed_connection
from mailout.contrib.django.convert import to_message
from mailout.exceptions import InvalidMessage
from mailout.outbox import EnqueueSettings, Message, check_message, enqueue_many

log = logging.getLogger(__name__)

# In the process that sends (the web app's), on prometheus_client's default registry:
# whatever exports that process's metrics shows it.
REFUSED: Final = Counter("mailout_django_refused",
                         "Django messages refused at enqueue with fail_silently (not queued)",
                         ["field"])


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

    def send_messages(self, email_messages: Iterable[Any]) -> int:
        messages: list[Message] = []
        for email in email_messages:
            if not email.recipients():
                continue
            try:
                messages.append(to_message(email, queue=self.queue,
                                           charset=email.encoding or settings.DEFAULT_CHARSET))
            except InvalidMessage as exc:
                self._refused(exc)
        if not messages:
            return 0
        with borrowed_connection(self.database) as conn:
            if not self.fail_silently:
                return len(enqueue_many(conn, messages, settings=self.settings, in_order=True))
            return self._checked_first(conn, messages)

    def _checked_first(self, conn: Any, messages: list[Message]) -> int:
        """With fail_silently: each message checked alone first, so that one refused
        message leaves the others, which are then queued together, in order. A refusal
        only the database can make (MySQL's statement size) leaves them one by one."""
        accepted = []
        for message in messages:
            try:
                check_message(message, settings=self.settings)
            except InvalidMessage as exc:
                self._refused(exc)
            else:
                accepted.append(message)
        if not accepted:
            return 0
        try:
            return len(enqueue_many(conn, accepted, settings=self.settings, in_order=True))
        except InvalidMessage:
            return sum(self._alone(conn, message) for message in accepted)

    def _alone(self, conn: Any, message: Message) -> int:
        try:
            enqueue_many(conn, [message], settings=self.settings)
        except InvalidMessage as exc:
            self._refused(exc)
            return 0
        return 1

    def _refused(self, exc: InvalidMessage) -> None:
        if not self.fail_silently:
            raise exc
        REFUSED.labels(field=exc.field).inc()
        log.error("mailout refused a Django message (field %s: %s); it was not queued",
                  exc.field, type(exc).__name__,
                  extra={"event": "django_message_refused", "field": exc.field,
                         "error": type(exc).__name__})
