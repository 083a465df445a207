"""Transactional enqueue: write outbox rows inside the caller's own transaction.

Commit means queued; rollback means nothing was queued. That is the whole point of
an outbox: the mail exists exactly when the business event does.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parseaddr
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from mailout.db import attachments as stored_attachments
from mailout.db import inserts, wakeups
from mailout.db.stores import store_for
from mailout.delivery.policy import DEFAULT_MAX_AGE as DEFAULT_QUEUE_AGE
from mailout.delivery.policy import MAX_AGE_SECONDS, QueuePolicy, RetryPolicy, parse_queue_policies
from mailout.exceptions import IdempotencyConflict, InvalidMessage, TemplateNotFound
from mailout.message import addresses, compose, template_params, validate, whole
from mailout.message.templates import resolve_variant, template_schema
from mailout.models import Attachment, EnqueueResult, Mailbox
from mailout.support import envparse, tracing
from mailout.support.bounded_cache import BoundedCache

if TYPE_CHECKING:  # the asyncio extension needs greenlet, which sync users may not have
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

DEFAULT_MAX_BYTES = 10_000_000  # a whole message after encoding (Postmark's, SES's limit)
# About 10 MB once base64-encoded: any one file under it fits a message of the default size.
DEFAULT_MAX_ATTACHMENT_BYTES = 7_000_000
DEFAULT_MAX_RECIPIENTS = 50
DEFAULT_MAX_AGE = 24 * 3600.0
MAX_EXPIRES_IN = MAX_AGE_SECONDS  # a message's longest age limit (ten years)
# Scheduled times every database stores, with room for expires_in after them.
_SEND_AT_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))
DEFAULT_TEMPLATES = "templates"  # the worker's default MAILOUT_TEMPLATES (worker/config.py)

Addresses = str | Mailbox | Sequence[str | Mailbox]


class NotifyMode(StrEnum):
    """How enqueue wakes idle workers on PostgreSQL (``MAILOUT_NOTIFY``); elsewhere
    workers poll whatever it says."""

    # NOTIFY after the caller's commit, from a connection of its own (mailout.db.wakeups):
    # nothing in the caller's transaction takes PostgreSQL's instance-wide notify lock.
    AFTER_COMMIT = "after-commit"
    # NOTIFY inside the caller's transaction (the only way before issue 38): its commit
    # takes that lock, and such commits go one at a time (docs/capacity.md).
    IN_TRANSACTION = "in-transaction"
    # No NOTIFY: workers find new mail by polling (MAILOUT_POLL_SECONDS).
    OFF = "off"


# MAILOUT_NOTIFY's boolean spellings, from when it was on or off.
_NOTIFY_WORDS = {"1": NotifyMode.AFTER_COMMIT, "true": NotifyMode.AFTER_COMMIT,
                 "yes": NotifyMode.AFTER_COMMIT, "on": NotifyMode.AFTER_COMMIT,
                 "0": NotifyMode.OFF, "false": NotifyMode.OFF, "no": NotifyMode.OFF}
_NOTIFY_MODE = envparse.choice(NotifyMode)


def _notify_mode(raw: str | None) -> NotifyMode:
    if not raw:
        return NotifyMode.AFTER_COMMIT
    return _NOTIFY_WORDS.get(raw.strip().lower()) or _NOTIFY_MODE("MAILOUT_NOTIFY", raw)


@dataclass(frozen=True, slots=True)
class EnqueueSettings:
    """What enqueue needs from the environment. ``from_env`` reads it; tests pass their own."""

    # When set, templates must exist there and params must cover their variables;
    # None checks nothing (from_env: MAILOUT_TEMPLATES_CHECK=off).
    templates_dir: Path | None = None
    message_id_domain: str | None = None
    max_message_bytes: int = DEFAULT_MAX_BYTES
    max_attachment_bytes: int = DEFAULT_MAX_ATTACHMENT_BYTES
    max_recipients: int = DEFAULT_MAX_RECIPIENTS
    max_age_seconds: float = DEFAULT_MAX_AGE
    # Per-queue age limits (MAILOUT_QUEUE_POLICIES, and the defaults of lanes.py:
    # critical 15 minutes, bulk 3 days); other queues use max_age_seconds.
    queue_max_age: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_QUEUE_AGE))
    notify: NotifyMode = NotifyMode.AFTER_COMMIT  # how idle workers are woken (PostgreSQL)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EnqueueSettings:
        env = os.environ if env is None else env
        # The worker's folder, MAILOUT_TEMPLATES else ./templates, whether it exists or
        # not: a template enqueue cannot find there is refused, not failed later by the
        # worker. An app that enqueues where the templates are not (they live with the
        # worker) says so with MAILOUT_TEMPLATES_CHECK=off.
        templates = env.get("MAILOUT_TEMPLATES") or DEFAULT_TEMPLATES
        check = env.get("MAILOUT_TEMPLATES_CHECK")
        checked = not check or envparse.boolean("MAILOUT_TEMPLATES_CHECK", check)
        domain = env.get("MAILOUT_MESSAGE_ID_DOMAIN") or _domain_of(env.get("MAIL_FROM", ""))
        return cls(
            templates_dir=Path(templates) if checked else None,
            message_id_domain=domain or None,
            max_message_bytes=_positive(env, "MAILOUT_MAX_MESSAGE_BYTES", DEFAULT_MAX_BYTES),
            max_attachment_bytes=_positive(env, "MAILOUT_MAX_ATTACHMENT_BYTES",
                                               DEFAULT_MAX_ATTACHMENT_BYTES),
            max_recipients=_positive(env, "MAILOUT_MAX_RECIPIENTS", DEFAULT_MAX_RECIPIENTS),
            max_age_seconds=_max_age(env, "MAILOUT_MAX_AGE_SECONDS", DEFAULT_MAX_AGE),
            queue_max_age=_queue_ages(env.get("MAILOUT_QUEUE_POLICIES")),
            notify=_notify_mode(env.get("MAILOUT_NOTIFY")),
        )


# Every variable from_env() reads: enqueue without settings parses them again only
# when one of them changed (tests/unit/test_enqueue_settings.py checks this list).
ENV_NAMES = ("MAILOUT_TEMPLATES", "MAILOUT_TEMPLATES_CHECK", "MAILOUT_MESSAGE_ID_DOMAIN",
             "MAIL_FROM", "MAILOUT_MAX_MESSAGE_BYTES", "MAILOUT_MAX_ATTACHMENT_BYTES",
             "MAILOUT_MAX_RECIPIENTS", "MAILOUT_MAX_AGE_SECONDS", "MAILOUT_QUEUE_POLICIES",
             "MAILOUT_NOTIFY")
# The parses remembered, per environment: a process has one, a test suite a few.
_FROM_ENV: BoundedCache[tuple[str | None, ...], EnqueueSettings] = BoundedCache(8)


def _settings_from_env() -> EnqueueSettings:
    """``EnqueueSettings.from_env()`` of this process, parsed again only when one of
    ENV_NAMES changed (parsing is much of an enqueue's own CPU: docs/capacity.md). Errors
    are raised on every call, as nothing is remembered from a failed parse."""
    env = os.environ
    key = tuple(env.get(name) for name in ENV_NAMES)
    settings = _FROM_ENV.get(key)
    if settings is None:
        settings = EnqueueSettings.from_env()
        _FROM_ENV.put(key, settings)
    return settings


_N = TypeVar("_N", int, float)


def _positive(env: Mapping[str, str], name: str, default: _N) -> _N:
    """Setting ``name`` as a number greater than 0 of ``default``'s type (envparse's
    rule and wording), or ``default`` when unset or empty."""
    raw = env.get(name)
    if not raw:
        return default
    return cast(_N, envparse.number(type(default), minimum=0, strict=True)(name, raw))


def _max_age(env: Mapping[str, str], name: str, default: float) -> float:
    """Setting ``name`` as an age limit in seconds, or ``default`` when unset."""
    raw = env.get(name)
    return float(_MAX_AGE(name, raw)) if raw else default


_MAX_AGE = envparse.number(float, minimum=0, strict=True, maximum=MAX_AGE_SECONDS)


def _domain_of(mailbox: str) -> str | None:
    addr = parseaddr(mailbox)[1]
    if "@" not in addr:
        return None
    return addr.rpartition("@")[2] or None


def _queue_ages(spec: str | None) -> dict[str, float]:
    ages = dict(DEFAULT_QUEUE_AGE)
    if spec:
        default = QueuePolicy(RetryPolicy(), DEFAULT_MAX_AGE)
        for queue, policy in parse_queue_policies(spec, default).items():
            ages[queue] = policy.max_age_seconds
    return ages


def make_message_id(domain: str | None) -> str:
    """A fresh RFC 5322 Message-ID: 128 random bits at ``domain``.

    Without a configured domain the host's name is used; the random part alone
    keeps it globally unique.
    """
    host = domain or socket.getfqdn() or "localhost"
    # The same os.urandom(16) a uuid4 draws, without building a UUID object around it.
    return f"<{os.urandom(16).hex()}@{host}>"


@dataclass(frozen=True, slots=True)
class Message:
    """One message to enqueue; the same arguments as :func:`enqueue`."""

    to: Addresses
    template: str | None = None
    params: Mapping[str, Any] | None = None
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    key: str | None = None
    queue: str = "default"
    priority: int = 0
    send_at: datetime | None = None
    expires_in: timedelta | float | None = None
    headers: Mapping[str, str] | None = None
    sender: str | None = None
    event: str | None = None  # the business event, for send-time checks (guards.py)
    version: str | int | None = None  # the event's version at enqueue
    cc: Addresses | None = None
    bcc: Addresses | None = None
    reply_to: Addresses | None = None
    attachments: Sequence[Attachment] = ()
    unsubscribe: str | Sequence[str] | None = None  # an https URL and/or a mailto: URI
    locale: str | None = None  # picks <template>/es-MX/, then <template>/es/, then <template>/
    # The whole message, built by the caller (CRLF line ends, its own Message-ID): sent
    # as it is over SMTP. to/cc/bcc and sender are then the envelope (any one token,
    # as the caller's own SMTP would send it), subject is what operators see, and
    # content arguments are refused (see mailout.message.whole).
    mime: bytes | None = None


def _validated_row(
    msg: Message, settings: EnqueueSettings,
    templates: dict[tuple[str, str | None], Checked] | None = None,
) -> dict[str, Any]:
    """The column values for ``msg``, or InvalidMessage naming the first bad field.

    ``templates`` remembers checked template names (name and schema version) for
    the rest of one :func:`enqueue_many` call.
    """
    if msg.mime is not None:
        return _whole_row(msg, settings)
    params_size = 0
    has_content = msg.subject is not None or msg.text is not None or msg.html is not None
    if msg.template is None and not has_content:
        raise InvalidMessage("template", "give a template, or a subject with text or html")
    if msg.template is not None and has_content:
        raise InvalidMessage("template", "give a template or subject/text/html, not both")
    row: dict[str, Any] = {
        **compose.recipients(msg.to, msg.cc, msg.bcc, msg.reply_to,
                             limit=settings.max_recipients),
        "sender": None if msg.sender is None else addresses.mailbox("sender", msg.sender),
        "queue": validate.queue(msg.queue),
        "priority": validate.priority(msg.priority),
        "idempotency_key": (
            f"random-{secrets.token_hex(16)}" if msg.key is None else validate.key(msg.key)
        ),
        "template": None,
        "params": None,
        "subject": None,
        "body_text": None,
        "body_html": None,
        "headers": compose.headers(msg.headers, reply_to=msg.reply_to is not None,
                                   unsubscribe=msg.unsubscribe),
        "event_ref": None if msg.event is None else validate.bounded("event", msg.event, 255),
        "event_version": None if msg.version is None
        else validate.bounded("version", str(msg.version), 64),
        "schema_version": None,
        "locale": None if msg.locale is None else validate.locale(msg.locale),
    }
    parts = [] if isinstance(msg.attachments, tuple | list) and not msg.attachments else \
        compose.attachments(msg.attachments, max_bytes=settings.max_attachment_bytes)
    row["attachment_digest"] = compose.list_digest(parts) if parts else None
    row["attachments"] = parts  # not a column: linked after the insert
    row["params_json"] = None  # not a column: the params as JSON text, once encoded
    if msg.template is not None:
        checked = None if templates is None else templates.get((msg.template, row["locale"]))
        if checked is None:
            checked = _template(msg.template, row["locale"], settings)
            if templates is not None:
                templates[(msg.template, row["locale"])] = checked
        row["template"], row["schema_version"], variant, needed = checked
        row["params"], row["params_json"], params_size = validate.params(
            {} if msg.params is None else msg.params)
        if variant is not None:
            template_params.check_params(variant, needed, row["params"])
    else:
        if msg.params is not None:
            raise InvalidMessage("params", "params need a template")
        if msg.subject is None or (msg.text is None and msg.html is None):
            raise InvalidMessage("subject", "a message without a template needs a subject "
                                 "and text or html")
        # Stored as it will be sent: the renderer drops surrounding whitespace, which a
        # header cannot carry faithfully anyway.
        row["subject"] = validate.text("subject", msg.subject, header=True,
                                       allow_empty=False).strip()
        row["body_text"] = None if msg.text is None else validate.text("text", msg.text)
        row["body_html"] = None if msg.html is None else validate.text("html", msg.html)
    content = {k: row[k] for k in ("subject", "body_text", "body_html", "headers")}
    if parts:
        compose.check_size(content, params_size, parts, settings.max_message_bytes)
    validate.size(content, settings.max_message_bytes, extra=params_size)
    row.update(_schedule(msg, settings))
    row["message_id"] = make_message_id(settings.message_id_domain)
    return row


def _whole_row(msg: Message, settings: EnqueueSettings) -> dict[str, Any]:
    """The column values for a message stored whole (``msg.mime``)."""
    given = [name for name in ("template", "params", "text", "html", "headers", "unsubscribe",
                               "locale", "reply_to") if getattr(msg, name) is not None]
    if given or msg.attachments:
        raise InvalidMessage("mime", f"a whole message carries its own content: give no "
                             f"{', '.join(given) or 'attachments'} with it")
    return {
        **whole.recipients(msg.to, msg.cc, msg.bcc, limit=settings.max_recipients),
        "sender": None if msg.sender is None else whole.envelope_address("sender", msg.sender),
        "queue": validate.queue(msg.queue),
        "priority": validate.priority(msg.priority),
        "idempotency_key": (
            f"random-{secrets.token_hex(16)}" if msg.key is None else validate.key(msg.key)
        ),
        "template": None, "params": None, "params_json": None, "schema_version": None,
        "body_text": None, "body_html": None, "headers": None, "locale": None,
        "attachments": [], "attachment_digest": None,
        # What operators see: the bytes carry the subject, encoded as their author chose,
        # and message_id() below checks their header lines.
        "subject": None if msg.subject is None else validate.text("subject", msg.subject),
        "event_ref": None if msg.event is None else validate.bounded("event", msg.event, 255),
        "event_version": None if msg.version is None
        else validate.bounded("version", str(msg.version), 64),
        **_schedule(msg, settings),
        "message_id": whole.message_id(msg.mime, max_bytes=settings.max_message_bytes),
        "mime": msg.mime,
    }


Checked = tuple[str, int | None, str | None, frozenset[str]]


def _template(name: str, locale: str | None, settings: EnqueueSettings) -> Checked:
    """The checked template name, its schema, the variant folder it will render from
    and the params that variant needs (None and none without a templates folder to
    look in); a variant must exist."""
    checked = validate.template_name(name, None)
    folder = settings.templates_dir
    if folder is None:
        return checked, None, None, frozenset()
    return template_params.lookup(folder, checked, locale,
                                  lambda: _find_template(folder, checked, locale))


def _find_template(folder: Path, checked: str, locale: str | None) -> Checked:
    variant = resolve_variant(folder, checked, locale)
    if variant is None:
        if locale is None or resolve_variant(folder, checked, None) is None:
            raise _not_found(folder, checked)
        raise InvalidMessage("locale", f"template {checked!r} has no variant for {locale!r} "
                             f"(looked for {locale}/, its language's folder and the template's "
                             f"own in {folder})")
    return (checked, template_schema(folder, checked), variant,
            template_params.required_params(folder, variant))


def _not_found(folder: Path, name: str) -> TemplateNotFound:
    where = os.path.abspath(folder)
    missing = "" if folder.is_dir() else ", a folder that does not exist"
    return TemplateNotFound(name, where, (
        f"no template {name!r} in {where}{missing} (MAILOUT_TEMPLATES, default "
        "./templates: the folder the worker renders from; where the templates live "
        "only with the worker, MAILOUT_TEMPLATES_CHECK=off enqueues without looking)"))


def _schedule(msg: Message, settings: EnqueueSettings) -> dict[str, Any]:
    """send_at and expires_in as absolute UTC times; None means "now" on the DB clock."""
    send_at = None
    if msg.send_at is not None:
        if not isinstance(msg.send_at, datetime):
            raise InvalidMessage("send_at", "must be a datetime")
        # Naive datetimes are taken as UTC, the only zone the database columns use.
        aware = msg.send_at if msg.send_at.tzinfo else msg.send_at.replace(tzinfo=UTC)
        send_at = aware.astimezone(UTC)
    expires = msg.expires_in if msg.expires_in is not None else settings.queue_max_age.get(
        msg.queue, settings.max_age_seconds)
    if isinstance(expires, timedelta):
        expires = expires.total_seconds()
    if isinstance(expires, bool) or not isinstance(expires, int | float) or not expires > 0:
        raise InvalidMessage("expires_in", "must be a positive number of seconds or a timedelta")
    if not expires <= MAX_EXPIRES_IN:  # also NaN and infinity
        raise InvalidMessage("expires_in", f"must be at most {MAX_EXPIRES_IN:.0f} seconds "
                             "(ten years)")
    if send_at is not None and not _SEND_AT_RANGE[0] <= send_at <= _SEND_AT_RANGE[1]:
        raise InvalidMessage("send_at", "must be between the years 1970 and 9000")
    return {"send_at": send_at, "expires_in": float(expires)}


def check_message(msg: Message, *, settings: EnqueueSettings | None = None) -> None:
    """Raise InvalidMessage for ``msg`` as :func:`enqueue_many` would before writing
    anything; return None when it would pass those checks (the database may still
    refuse it: an idempotency conflict, MySQL's statement size)."""
    _validated_row(msg, settings or _settings_from_env())


def _differing(existing: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(col for col in inserts.CONTENT_COLUMNS if existing[col] != row[col])


def enqueue_many(
    conn: Connection | Session,
    messages: Iterable[Message],
    *,
    settings: EnqueueSettings | None = None,
    ignore_conflicts: bool = False,
    in_order: bool = False,
) -> list[EnqueueResult]:
    """Enqueue several messages in the caller's transaction with one INSERT.

    Every message is validated first, so one bad message raises InvalidMessage and
    nothing is written. Keys already present (in the table or earlier in the same
    call) follow the rules of :func:`enqueue`; an IdempotencyConflict also leaves
    nothing of the batch written. Results come back in input order.

    ``in_order``: a worker starts each message's first attempt only after the one
    before it in this call has finished its own (messages of one queue, claimed by one
    worker; a retry goes out when it is due, whatever the order). Django's backend asks
    for it: its SMTP backend sends one message after the other.
    """
    settings = settings or _settings_from_env()
    # A template is looked up on disk once per call, not once per message.
    templates: dict[tuple[str, str | None], Checked] = {}
    rows = [_validated_row(m, settings, templates) for m in messages]
    connection = conn.connection() if isinstance(conn, Session) else conn
    with tracing.creating(rows) as trace_context:
        if trace_context is not None:  # the create span's, stored with every row
            for row in rows:
                row.update(trace_context)
        return _write(connection, rows, settings, ignore_conflicts=ignore_conflicts,
                      in_order=in_order)


def _write(connection: Connection, rows: list[dict[str, Any]], settings: EnqueueSettings, *,
           ignore_conflicts: bool, in_order: bool) -> list[EnqueueResult]:
    """Write validated ``rows``: the INSERT, attachments and late columns, as
    :func:`enqueue_many` says."""
    with inserts.schema_required():
        inserts.refuse_oversize(connection, rows)
        stored = inserts.insert_messages(
            connection, rows, notify=settings.notify is NotifyMode.IN_TRANSACTION)
    results: list[EnqueueResult] = []
    linked: list[tuple[int, Sequence[compose.AttachmentPart]]] = []
    conflict: IdempotencyConflict | None = None
    for row in rows:
        hit = stored[row["idempotency_key"]]
        created = hit.created and hit.message_id == row["message_id"]
        if created and row["attachments"]:
            linked.append((hit.id, row["attachments"]))
        if not created and not ignore_conflicts and conflict is None:
            differing = _differing(hit.content, row)
            if differing:
                conflict = IdempotencyConflict(row["idempotency_key"], hit.id, differing)
        results.append(EnqueueResult(hit.id, row["idempotency_key"], hit.message_id, created))
    if conflict is not None:
        # All or nothing: the rows this call inserted go again before the error.
        inserts.withdraw(connection, [r.id for r in results if r.created])
        raise conflict
    if linked:
        stored_attachments.store(connection, linked)
    token = secrets.token_hex(16) if in_order and len(rows) > 1 else None
    inserts.store_late(connection, [(r.id, row.get("mime"), token)
                                    for r, row in zip(results, rows, strict=True)
                                    if r.created and (token or row.get("mime") is not None)])
    created = [r.id for r in results if r.created]
    if (created and settings.notify is NotifyMode.AFTER_COMMIT
            and store_for(connection).listens):
        wakeups.after_commit(connection, created)
    return results


def enqueue(
    conn: Connection | Session,
    *,
    to: Addresses,
    template: str | None = None,
    params: Mapping[str, Any] | None = None,
    subject: str | None = None,
    text: str | None = None,
    html: str | None = None,
    key: str | None = None,
    queue: str = "default",
    priority: int = 0,
    send_at: datetime | None = None,
    expires_in: timedelta | float | None = None,
    headers: Mapping[str, str] | None = None,
    sender: str | None = None,
    event: str | None = None,
    version: str | int | None = None,
    cc: Addresses | None = None,
    bcc: Addresses | None = None,
    reply_to: Addresses | None = None,
    attachments: Sequence[Attachment] = (),
    unsubscribe: str | Sequence[str] | None = None,
    locale: str | None = None,
    settings: EnqueueSettings | None = None,
    ignore_conflicts: bool = False,
) -> EnqueueResult:
    """Write one outbox row on ``conn`` (a Connection or Session), in its transaction.

    - Commit queues the message, rollback discards it: call this in the same
      transaction as the business event.
    - ``key`` is the idempotency key, derived from the event (``order-1234-confirmation``).
      A key already in the table returns that row with ``created=False`` and writes
      nothing. If its content differs, :class:`IdempotencyConflict` is raised, since
      a different message under the same key is almost always a bug; pass
      ``ignore_conflicts=True`` to return the existing row instead. ``key=None`` gets
      a random key, which deduplicates nothing.
    - ``expires_in`` is the age limit (default ``MAILOUT_MAX_AGE_SECONDS``, 24 h),
      counted from ``send_at`` or from now.
    - ``event`` and ``version`` name the business event and its version, so that a
      check registered for the template can cancel the message at send time if the
      event is no longer current (see :mod:`mailout.delivery.guards`). A template whose
      ``meta.toml`` declares ``schema = N`` stores N with the message.
    - ``to``, ``cc``, ``bcc`` and ``reply_to`` take one address or a list; a string
      holds one mailbox, display name kept exactly (``'"Doe, John" <j@example.com>'``).
      Bcc recipients get the message but appear in no header. At most
      ``MAILOUT_MAX_RECIPIENTS`` (50) distinct recipients.
    - ``attachments``: :class:`mailout.Attachment` items, stored once per distinct
      content in the same transaction; ``inline=True`` parts are referenced from the
      HTML as ``cid:``. Each at most ``MAILOUT_MAX_ATTACHMENT_BYTES``, the whole
      message at most ``MAILOUT_MAX_MESSAGE_BYTES`` once encoded.
    - ``unsubscribe``: an https URL and/or a mailto: URI for ``List-Unsubscribe`` (an
      https URL adds RFC 8058 one-click ``List-Unsubscribe-Post``).
    - ``locale`` (``es-MX``) renders ``<template>/es-MX/``, else ``<template>/es/``,
      else ``<template>/``; one of them must exist.
    - Bad input raises :class:`InvalidMessage` naming the field; nothing is written.
    """
    msg = Message(
        to=to, template=template, params=params, subject=subject, text=text, html=html,
        key=key, queue=queue, priority=priority, send_at=send_at, expires_in=expires_in,
        headers=headers, sender=sender, event=event, version=version, cc=cc, bcc=bcc,
        reply_to=reply_to, attachments=attachments, unsubscribe=unsubscribe, locale=locale,
    )
    return enqueue_many(conn, [msg], settings=settings, ignore_conflicts=ignore_conflicts)[0]


async def enqueue_async(conn: AsyncConnection | AsyncSession, **kwargs: Any) -> EnqueueResult:
    """:func:`enqueue` for an ``AsyncConnection`` or ``AsyncSession``; same arguments."""
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(conn, AsyncSession):
        return await conn.run_sync(lambda session: enqueue(session, **kwargs))
    return await conn.run_sync(lambda sync_conn: enqueue(sync_conn, **kwargs))


async def enqueue_many_async(
    conn: AsyncConnection | AsyncSession, messages: Iterable[Message], **kwargs: Any
) -> list[EnqueueResult]:
    """:func:`enqueue_many` for an ``AsyncConnection`` or ``AsyncSession``."""
    from sqlalchemy.ext.asyncio import AsyncSession

    batch = list(messages)
    if isinstance(conn, AsyncSession):
        return await conn.run_sync(lambda session: enqueue_many(session, batch, **kwargs))
    return await conn.run_sync(lambda sync_conn: enqueue_many(sync_conn, batch, **kwargs))
