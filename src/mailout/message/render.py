"""Turn a claimed outbox row into an :class:`~mailout.message.envelope.Envelope`.

Templates live in a folder, one sub-folder per template: ``subject.txt``,
``text.txt`` and an optional ``html.html``. Only the HTML is autoescaped; a
missing parameter fails loudly (``StrictUndefined``). Messages stored already
rendered (subject/text/html set, no template) skip Jinja.

Rendering checks everything that could make the message unsendable (headers,
addresses, encodability) and returns the structured envelope; its MIME form is
built on first use, by :mod:`mailout.message.mime`, which writes the wire format
directly instead of going through the stdlib's ``email`` objects (many times slower:
docs/capacity.md, "Figures behind choices in the code"). The body is kept 7-bit clean
(quoted-printable or base64), so every line stays short and no server has to support
8BITMIME.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import jinja2

from mailout.exceptions import RenderError
from mailout.message import mime, parsed
from mailout.message.addresses import extra_header, parse_mailbox
from mailout.message.envelope import Envelope
from mailout.message.return_path import ReturnPath
from mailout.message.templates import (
    HTML_FILE,
    SUBJECT_FILE,
    TEXT_FILE,
    validate_template_name,
    variant_path,
    variants,
)
from mailout.message.validate import BAD_HEADER_CHARS
from mailout.models import Attachment, ClaimedMessage, Mailbox

DEFAULT_KEY_HEADER = "Idempotency-Key"  # the key's header on the messages mailout renders
_HEADER_NAME_RE = re.compile(r"[!-9;-~]+")  # RFC 5322 ftext: printable ASCII but ":"
# Headers the renderer owns; extras may not set them (Content-* too, by prefix).
_OWN_HEADERS = frozenset({"message-id", "date", "from", "to", "cc", "bcc", "subject",
                          "mime-version"})
_MAX_LINE = 998  # RFC 5322 hard limit, CRLF excluded
# RFC 5322 3.6: at most one of each (the renderer's own headers are refused anyway).
_ONCE = frozenset({"reply-to", "sender", "in-reply-to", "references"})
# A template can fail on the data it is given (a filter on the wrong type, a
# division by zero...): permanent for this message, so a RenderError. OSError is
# left out: an unreadable file may be fixed by an operator.
_TEMPLATE_DATA_ERRORS = (
    jinja2.TemplateError,
    TypeError,
    ValueError,
    ArithmeticError,
    LookupError,
    AttributeError,
)


class Renderer:
    """Renders claimed messages into envelopes. Thread-safe once built.

    ``mail_from`` is the default From (``addr`` or ``Name <addr>``), used when a
    message has no sender. Raises ValueError for a bad ``mail_from`` or
    ``idempotency_header`` (None: send the key in no header, for a transport that
    carries it natively or a relay that reads none). ``clock`` returns "now" for
    the Date header (tests).
    ``return_path`` (``MAILOUT_RETURN_PATH``, e.g. ``bounces+{id}@shop.example``) makes
    the envelope sender carry the row id, signed with ``return_path_secret``
    (``MAILOUT_RETURN_PATH_SECRET``), so bounce mail names its row and nobody else can
    name it; ConfigError for a template without one ``{id}`` or without a secret.
    Templates are compiled once and cached for the life of the Renderer: edits
    on disk are not picked up until the process restarts.
    """

    def __init__(
        self,
        templates_dir: Path | None,
        *,
        mail_from: str,
        idempotency_header: str | None = DEFAULT_KEY_HEADER,
        clock: Callable[[], datetime] | None = None,
        return_path: str | None = None,
        return_path_secret: str | None = None,
        whole_key_header: str | None = None,
    ) -> None:
        if idempotency_header is not None and (
                not _HEADER_NAME_RE.fullmatch(idempotency_header)
                or _is_own(idempotency_header)):
            raise ValueError(f"bad idempotency header name {idempotency_header!r}")
        self._from = parse_mailbox("From", mail_from)
        self._from_header = mime.address("From", [self._from])
        self._mail_from = mail_from
        # VERP: a per-message envelope sender, so that a bounce names its row.
        self._return_path = (ReturnPath(return_path, return_path_secret) if return_path
                             else None)
        self._idempotency_header = idempotency_header
        # A message stored whole goes out as its author built it: the key rides in a
        # header only when one was asked for (a relay's own, or the setting given).
        if whole_key_header is not None and (not _HEADER_NAME_RE.fullmatch(whole_key_header)
                                             or _is_own(whole_key_header)):
            raise ValueError(f"bad idempotency header name {whole_key_header!r}")
        self._whole_key_header = whole_key_header
        self._clock = clock or (lambda: datetime.now(UTC))
        self._last_date: tuple[datetime | None, str] = (None, "")
        self._env: jinja2.Environment | None = None
        if templates_dir is not None:
            self._env = jinja2.Environment(
                loader=jinja2.FileSystemLoader(templates_dir),
                undefined=jinja2.StrictUndefined,
                autoescape=jinja2.select_autoescape(
                    enabled_extensions=("html",), default_for_string=False, default=False
                ),
                # Workers are long-lived and templates ship with the code: skip the
                # per-render stat() that checks the files for changes.
                auto_reload=False,
            )
        # name -> (subject, text, html or None), compiled: a lookup per render
        # instead of three trips through Jinja's loader cache.
        self._templates: dict[tuple[str, str | None],
                              tuple[jinja2.Template, jinja2.Template,
                                    jinja2.Template | None]] = {}

    def render(self, msg: ClaimedMessage) -> Envelope:
        """Render ``msg`` into an envelope.

        Raises :class:`RenderError` (permanent for this message) for: a missing or
        invalid template (for the message's locale: the first of ``<name>/es-MX/``,
        ``<name>/es/`` and ``<name>/`` that exists), an undefined parameter, a
        template syntax or runtime error, a message with neither a template nor a
        subject plus text/html, a template together with pre-rendered content, a
        line break or control character in the subject, a bad From/To address (several, none, or
        non-ASCII, which would need SMTPUTF8), a malformed stored Cc, Bcc or
        Reply-To mailbox or attachment, or an extra header that is malformed or
        would override one the renderer sets. Bcc recipients are in the envelope,
        never in a header.
        """
        if msg.mime is not None:
            return self._whole(msg, msg.mime)
        subject, text, html = self._content(msg)
        return self._build(msg, subject, text, html)

    def _whole(self, msg: ClaimedMessage, data: bytes) -> Envelope:
        """A message stored whole: its bytes go out as they are (with the key header
        first when one is asked for); its fields, read back, serve HTTP transports."""
        try:
            fields = parsed.parse(data)
            sender = Mailbox(_checked_envelope(msg.sender or self._from[1]),
                             fields.sender_name)
            to = tuple(Mailbox(_checked_envelope(m.address), m.name) for m in msg.to) or (
                () if msg.cc or msg.bcc else (Mailbox(_checked_envelope(msg.recipient)),))
            cc = tuple(Mailbox(_checked_envelope(m.address), m.name) for m in msg.cc)
            bcc = tuple(Mailbox(_checked_envelope(m.address), m.name) for m in msg.bcc)
            wire = data
            if self._whole_key_header is not None:
                if BAD_HEADER_CHARS.search(msg.key):
                    raise ValueError("the key has a control character")
                wire = mime.unstructured(self._whole_key_header, msg.key).encode() + data
        except Exception as exc:  # the parser's errors have no common base
            raise RenderError(None, f"stored message: {type(exc).__name__}: {exc}") from exc
        return Envelope(
            message_id=msg.message_id, idempotency_key=msg.key, sender=sender, to=to,
            subject=fields.subject, text=fields.text, html=fields.html, cc=cc, bcc=bcc,
            reply_to=fields.reply_to, headers=fields.headers, attachments=fields.attachments,
            return_path=self._return_path.for_row(msg.id) if self._return_path else None,
            deliver_to=msg.pending_recipients if msg.settled else (),
            wire_builder=lambda: wire,
        )

    def _content(self, msg: ClaimedMessage) -> tuple[str, str | None, str | None]:
        text: str | None
        if msg.template is not None:
            if (msg.subject, msg.text, msg.html) != (None, None, None):
                raise RenderError(msg.template, "has both a template and pre-rendered content")
            subject, text, html = self._render_template(msg.template, msg.params or {},
                                                        msg.locale)
        else:
            if msg.subject is None or (msg.text is None and msg.html is None):
                raise RenderError(None, "neither a template nor a subject with a text or html body")
            subject, text, html = msg.subject, msg.text, msg.html
        subject = subject.strip()
        if BAD_HEADER_CHARS.search(subject):
            raise RenderError(msg.template, "subject has a line break or control character")
        return subject, text, html

    def _render_template(self, name: str, params: dict[str, Any],
                         locale: str | None = None) -> tuple[str, str, str | None]:
        subject, text, html = self._compiled(name, locale)
        return (
            _render(name, SUBJECT_FILE, subject, params),
            _render(name, TEXT_FILE, text, params),
            None if html is None else _render(name, HTML_FILE, html, params),
        )

    def _compiled(
        self, name: str, locale: str | None = None
    ) -> tuple[jinja2.Template, jinja2.Template, jinja2.Template | None]:
        """The template's files for ``locale``: the first of ``<name>/es-MX/``,
        ``<name>/es/`` and ``<name>/`` that has them (see :func:`templates.variants`)."""
        cached = self._templates.get((name, locale))
        if cached is not None:
            return cached
        if self._env is None:
            raise RenderError(name, "no templates directory is configured")
        try:
            validate_template_name(name)
        except ValueError as exc:
            raise RenderError(name, str(exc)) from exc
        for variant in variants(locale):
            folder = variant_path(name, variant)
            subject = _load(self._env, name, f"{folder}/{SUBJECT_FILE}")
            text = _load(self._env, name, f"{folder}/{TEXT_FILE}")
            if subject is not None or text is not None:
                break
        if subject is None and text is None:
            raise RenderError(name, "template not found" if locale is None
                              else f"template not found for locale {locale!r}")
        if subject is None or text is None:
            raise RenderError(name, f"template needs both {SUBJECT_FILE} and {TEXT_FILE}")
        # Only complete templates are cached: a missing one may still be deployed.
        # Two threads may compile the same template at once; both results are equal.
        compiled = (subject, text, _load(self._env, name, f"{folder}/{HTML_FILE}"))
        self._templates[(name, locale)] = compiled
        return compiled

    def _build(
        self, msg: ClaimedMessage, subject: str, text: str | None, html: str | None
    ) -> Envelope:
        template = msg.template
        extras = msg.headers or {}
        try:
            if msg.sender is None or msg.sender == self._mail_from:
                sender, from_header = self._from, self._from_header
            else:
                sender = parse_mailbox("From", msg.sender)
                from_header = mime.address("From", [sender])
            to = tuple(_checked("To", m) for m in msg.to) or (
                Mailbox(*reversed(parse_mailbox("To", msg.recipient))),)
            cc = tuple(_checked("Cc", m) for m in msg.cc)
            bcc = tuple(_checked("Bcc", m) for m in msg.bcc)
            reply_to = tuple(_checked("Reply-To", m) for m in msg.reply_to)
            for field, value in (("Message-ID", msg.message_id), ("key", msg.key)):
                if not value or BAD_HEADER_CHARS.search(value) or len(value) > _MAX_LINE // 2:
                    raise ValueError(f"{field} is empty, too long or has a control character")
            headers = [
                mime.raw("Message-ID", msg.message_id),
                mime.raw("Date", self._date()),
                from_header,
                mime.address("To", [(m.name, m.address) for m in to]),
            ]
            if cc:
                headers.append(mime.address("Cc", [(m.name, m.address) for m in cc]))
            if reply_to:
                headers.append(mime.address("Reply-To", [(m.name, m.address) for m in reply_to]))
            headers += [
                mime.unstructured("Subject", subject),
                "MIME-Version: 1.0\r\n",
            ]
            if self._idempotency_header is not None:
                headers.append(mime.unstructured(self._idempotency_header, msg.key))
            seen: set[str] = {"reply-to"} if reply_to else set()
            for name, value in extras.items():
                if not _HEADER_NAME_RE.fullmatch(name) or BAD_HEADER_CHARS.search(value):
                    raise ValueError(f"extra header {name!r} is malformed")
                lowered = name.lower()
                if _is_own(name) or lowered == (self._idempotency_header or "").lower():
                    raise ValueError(f"extra header {name!r} may not override the renderer's")
                if lowered in seen and lowered in _ONCE:
                    raise ValueError(f"extra header {name!r} is given twice")
                seen.add(lowered)
                headers.append(extra_header(name, value))
            head = "".join(headers).encode("ascii")
            for body in (text, html):
                if body is not None and not body.isascii():
                    body.encode("utf-8")  # a lone surrogate fails here, not on the wire
            for attachment in msg.attachments:
                _check_attachment(attachment)
        except ValueError as exc:
            # UnicodeEncodeError (a lone surrogate in a body) is a ValueError too.
            raise RenderError(template, str(exc)) from exc
        return Envelope(
            message_id=msg.message_id,
            idempotency_key=msg.key,
            sender=Mailbox(sender[1], sender[0]),
            to=to,
            subject=subject,
            text=text,
            html=html,
            cc=cc,
            bcc=bcc,
            reply_to=reply_to,
            headers=tuple(extras.items()),
            return_path=self._return_path.for_row(msg.id) if self._return_path else None,
            attachments=msg.attachments,
            # A retry of the recipients still pending: the others have it already.
            deliver_to=msg.pending_recipients if msg.settled else (),
            # Everything that can fail was checked above: building the wire form later
            # (only for transports that need it) should not raise; if it does, that is
            # a RenderError too (see _wire).
            wire_builder=functools.partial(_wire, template, head, text, html, msg.attachments),
            wire_crlf_only=True,  # mime.build writes CRLF line ends only (test_mime checks)
        )

    def _date(self) -> str:
        """The Date header value for now, formatted once per second (it shows seconds)."""
        now = self._clock()
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)  # naive means UTC, as everywhere in mailout
        second = now.replace(microsecond=0)
        cached = self._last_date  # one tuple, so another thread sees a consistent pair
        if cached[0] != second:
            cached = self._last_date = (second, format_datetime(second))
        return cached[1]


def _wire(template: str | None, head: bytes, text: str | None, html: str | None,
          attachments: tuple[Attachment, ...]) -> bytes:
    """The message's wire form; RenderError for any error building it (raised before
    any byte of the content can have left, so the message is unsendable as it is)."""
    try:
        return mime.build(head, text, html, attachments)
    except Exception as exc:  # a builder bug on odd input: permanent for this message
        raise RenderError(template, f"{type(exc).__name__}: {exc}") from exc


def _load(env: jinja2.Environment, name: str, path: str) -> jinja2.Template | None:
    """One file of a template (``path`` under the templates directory), compiled;
    None when the file does not exist."""
    file = path.rpartition("/")[2]
    try:
        # get_template only loads and compiles this one file, so a
        # TemplateNotFound here is about the file itself, not an {% include %}.
        template = env.get_template(path)
    except jinja2.TemplateNotFound:
        return None
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(name, f"{file} line {exc.lineno}: {exc.message}") from exc
    except UnicodeDecodeError as exc:
        raise RenderError(name, f"{file} is not valid UTF-8") from exc
    # Jinja keeps globals as a ChainMap over the environment's and copies it into
    # every render's context; iterating a ChainMap is slow (a third of a render of a
    # small template). The globals never change after start-up: flatten them once.
    template.globals = dict(template.globals)
    return template


def _render(name: str, file: str, template: jinja2.Template, params: dict[str, Any]) -> str:
    try:
        return template.render(params)
    except jinja2.UndefinedError as exc:
        raise RenderError(name, f"{file}: {exc.message}") from exc
    except _TEMPLATE_DATA_ERRORS as exc:
        raise RenderError(name, f"{file}: {type(exc).__name__}: {exc}") from exc


def _is_own(name: str) -> bool:
    lowered = name.lower()
    return lowered in _OWN_HEADERS or lowered.startswith("content-")


def _checked(field: str, mailbox: Mailbox) -> Mailbox:
    """A stored mailbox, checked again before it becomes a header: ValueError for a
    control character or a non-ASCII address (no SMTPUTF8)."""
    if (BAD_HEADER_CHARS.search(mailbox.name) or BAD_HEADER_CHARS.search(mailbox.address)
            or not mailbox.address.isascii() or "@" not in mailbox.address
            or any(c in mailbox.address for c in " <>,;")):
        raise ValueError(f"{field} holds a malformed address")
    return mailbox


_NOT_ENVELOPE = re.compile(r"[\x00-\x20\x7f\x85\u2028\u2029<>]")


def _checked_envelope(address: str) -> str:
    """A stored envelope address of a whole message, checked again before it goes into
    an SMTP command: one token, no whitespace, control character or <>."""
    if not address or _NOT_ENVELOPE.search(address):
        raise ValueError("an envelope address is malformed")
    return address


_CONTENT_TYPE = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+")
_CID = re.compile(r"[!-;=?-~]+")  # printable ASCII but "<" and ">"


def _check_attachment(attachment: Attachment) -> None:
    """ValueError unless the part's headers can be written as they are."""
    if not attachment.filename or BAD_HEADER_CHARS.search(attachment.filename):
        raise ValueError(f"attachment {attachment.filename!r} has a malformed filename")
    if not _CONTENT_TYPE.fullmatch(attachment.content_type):
        raise ValueError(f"attachment {attachment.filename!r} has a malformed content type")
    if attachment.cid is not None and not _CID.fullmatch(attachment.cid):
        raise ValueError(f"attachment {attachment.filename!r} has a malformed cid")
