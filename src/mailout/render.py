"""Turn a claimed outbox row into a wire-ready :class:`~mailout.transport.Envelope`.

Templates live in a folder, one sub-folder per template: ``subject.txt``,
``text.txt`` and an optional ``html.html``. Only the HTML is autoescaped; a
missing parameter fails loudly (``StrictUndefined``). Messages stored already
rendered (subject/text/html set, no template) skip Jinja.

The MIME message is built with the stdlib :mod:`email` package. The body is kept
7-bit clean (quoted-printable or base64 as needed), so every line stays short and
no server has to support 8BITMIME. Unstructured headers (Subject, the idempotency
key, most extras) are folded here rather than by the stdlib, whose folder on
Python 3.11 can drop or add a space where it mixes plain and RFC 2047 words.
"""

from __future__ import annotations

import base64
import email.errors
import re
from collections.abc import Callable
from datetime import UTC, datetime
from email import headerregistry
from email.message import EmailMessage
from email.policy import EmailPolicy
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import jinja2

from mailout.exceptions import RenderError
from mailout.models import ClaimedMessage
from mailout.transport import Envelope

SUBJECT_FILE = "subject.txt"
TEXT_FILE = "text.txt"
HTML_FILE = "html.html"

_TEMPLATE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_MAX_TEMPLATE_NAME = 100
_HEADER_NAME_RE = re.compile(r"[!-9;-~]+")  # RFC 5322 ftext: printable ASCII but ":"
# Headers the renderer owns; extras may not set them (Content-* too, by prefix).
_OWN_HEADERS = frozenset({"message-id", "date", "from", "to", "subject", "mime-version"})
# Every character str.splitlines() breaks on, plus the other C0 controls and DEL:
# any of them in a header value is an injection attempt or a rendering bug.
_BAD_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
_MAX_LINE = 998  # RFC 5322 hard limit, CRLF excluded
_FOLD_AT = 78  # RFC 5322 recommended limit
_MAX_ENCODED_LINE = 76  # RFC 2047: a line holding encoded-words
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


def validate_template_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a safe template folder name.

    Allowed: 1-100 characters from ``[A-Za-z0-9_.-]``, not starting with a dot,
    never containing "..". So no path separators, no way out of the folder.
    """
    if not isinstance(name, str) or not name or len(name) > _MAX_TEMPLATE_NAME:
        raise ValueError(f"template name must be 1-{_MAX_TEMPLATE_NAME} characters: {name!r}")
    if ".." in name or not _TEMPLATE_NAME_RE.fullmatch(name):
        raise ValueError(
            f"bad template name {name!r}: use letters, digits, '_', '.' and '-', "
            "with no leading dot and no '..'"
        )


def template_exists(templates_dir: Path, name: str) -> bool:
    """True when ``name`` is a valid name whose folder has subject.txt and text.txt."""
    try:
        validate_template_name(name)
    except ValueError:
        return False
    folder = templates_dir / name
    return (folder / SUBJECT_FILE).is_file() and (folder / TEXT_FILE).is_file()


class Renderer:
    """Renders claimed messages into envelopes. Thread-safe once built.

    ``mail_from`` is the default From (``addr`` or ``Name <addr>``), used when a
    message has no sender. Raises ValueError for a bad ``mail_from`` or
    ``idempotency_header``. ``clock`` returns "now" for the Date header (tests).
    Templates are compiled once and cached for the life of the Renderer: edits
    on disk are not picked up until the process restarts.
    """

    def __init__(
        self,
        templates_dir: Path | None,
        *,
        mail_from: str,
        idempotency_header: str = "Idempotency-Key",
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if not _HEADER_NAME_RE.fullmatch(idempotency_header) or _is_own(idempotency_header):
            raise ValueError(f"bad idempotency header name {idempotency_header!r}")
        _addr_spec("From", mail_from)
        self._mail_from = mail_from
        self._idempotency_header = idempotency_header
        self._clock = clock or (lambda: datetime.now(UTC))
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

    def render(self, msg: ClaimedMessage) -> Envelope:
        """Render ``msg`` into an envelope.

        Raises :class:`RenderError` (permanent for this message) for: a missing or
        invalid template, an undefined parameter, a template syntax or runtime
        error, a message with neither a template nor a subject plus text/html, a
        template together with pre-rendered content, a line break or control
        character in the subject, a bad From/To address (several, none, or
        non-ASCII, which would need SMTPUTF8), or an extra header that is
        malformed or would override one the renderer sets.
        """
        subject, text, html = self._content(msg)
        return self._build(msg, subject, text, html)

    def _content(self, msg: ClaimedMessage) -> tuple[str, str | None, str | None]:
        text: str | None
        if msg.template is not None:
            if (msg.subject, msg.text, msg.html) != (None, None, None):
                raise RenderError(msg.template, "has both a template and pre-rendered content")
            subject, text, html = self._render_template(msg.template, msg.params or {})
        else:
            if msg.subject is None or (msg.text is None and msg.html is None):
                raise RenderError(None, "neither a template nor a subject with a text or html body")
            subject, text, html = msg.subject, msg.text, msg.html
        subject = subject.strip()
        if _BAD_HEADER_CHARS.search(subject):
            raise RenderError(msg.template, "subject has a line break or control character")
        return subject, text, html

    def _render_template(self, name: str, params: dict[str, Any]) -> tuple[str, str, str | None]:
        if self._env is None:
            raise RenderError(name, "no templates directory is configured")
        try:
            validate_template_name(name)
        except ValueError as exc:
            raise RenderError(name, str(exc)) from exc
        subject = _render_file(self._env, name, SUBJECT_FILE, params)
        text = _render_file(self._env, name, TEXT_FILE, params)
        if subject is None and text is None:
            raise RenderError(name, "template not found")
        if subject is None or text is None:
            raise RenderError(name, f"template needs both {SUBJECT_FILE} and {TEXT_FILE}")
        return subject, text, _render_file(self._env, name, HTML_FILE, params)

    def _build(
        self, msg: ClaimedMessage, subject: str, text: str | None, html: str | None
    ) -> Envelope:
        template = msg.template
        sender = msg.sender or self._mail_from
        extras = msg.headers or {}
        try:
            mail_from = _addr_spec("From", sender)
            rcpt_to = _addr_spec("To", msg.recipient)
            for field, value in (("Message-ID", msg.message_id), ("key", msg.key)):
                if not value or _BAD_HEADER_CHARS.search(value) or len(value) > _MAX_LINE // 2:
                    raise ValueError(f"{field} is empty, too long or has a control character")
            for name, value in extras.items():
                if not _HEADER_NAME_RE.fullmatch(name) or _BAD_HEADER_CHARS.search(value):
                    raise ValueError(f"extra header {name!r} is malformed")
                if _is_own(name) or name.lower() == self._idempotency_header.lower():
                    raise ValueError(f"extra header {name!r} may not override the renderer's")
        except ValueError as exc:
            raise RenderError(template, str(exc)) from exc

        now = self._clock()
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)  # naive means UTC, as everywhere in mailout
        email_msg = EmailMessage(policy=WIRE_POLICY)
        try:
            email_msg["Message-ID"] = msg.message_id
            email_msg["Date"] = format_datetime(now)
            email_msg["From"] = sender
            email_msg["To"] = msg.recipient
            email_msg["Subject"] = subject
            email_msg["MIME-Version"] = "1.0"
            email_msg[self._idempotency_header] = msg.key
            for name, value in extras.items():
                email_msg[name] = value
            if text is not None:
                email_msg.set_content(text, subtype="plain", charset="utf-8")
                if html is not None:
                    email_msg.add_alternative(html, subtype="html", charset="utf-8")
            else:
                email_msg.set_content(html or "", subtype="html", charset="utf-8")
            data = email_msg.as_bytes()
        except (ValueError, TypeError, email.errors.MessageError) as exc:
            # e.g. two extras that differ only in case for a header allowed once
            raise RenderError(template, f"cannot build the message: {exc}") from exc
        return Envelope(mail_from=mail_from, rcpt_to=rcpt_to, data=data, message_id=msg.message_id)


def _render_file(
    env: jinja2.Environment, name: str, file: str, params: dict[str, Any]
) -> str | None:
    """Render one file of a template; None when the file does not exist."""
    try:
        # get_template only loads and compiles this one file, so a
        # TemplateNotFound here is about the file itself, not an {% include %}.
        template = env.get_template(f"{name}/{file}")
    except jinja2.TemplateNotFound:
        return None
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(name, f"{file} line {exc.lineno}: {exc.message}") from exc
    except UnicodeDecodeError as exc:
        raise RenderError(name, f"{file} is not valid UTF-8") from exc
    try:
        return template.render(params)
    except jinja2.UndefinedError as exc:
        raise RenderError(name, f"{file}: {exc.message}") from exc
    except _TEMPLATE_DATA_ERRORS as exc:
        raise RenderError(name, f"{file}: {type(exc).__name__}: {exc}") from exc


def _is_own(name: str) -> bool:
    lowered = name.lower()
    return lowered in _OWN_HEADERS or lowered.startswith("content-")


_REGISTRY = headerregistry.HeaderRegistry()


def _addr_spec(field: str, value: str) -> str:
    """The bare address of a single-mailbox header value; ValueError otherwise."""
    if _BAD_HEADER_CHARS.search(value):
        raise ValueError(f"{field} contains a line break or control character")
    header = _REGISTRY(field, value)
    assert isinstance(header, headerregistry.AddressHeader)  # From and To always are
    addresses = header.addresses
    if len(addresses) == 1 and not addresses[0].addr_spec.isascii():
        raise ValueError(f"{field} must be an ASCII address (no SMTPUTF8 support): {value!r}")
    if header.defects or len(addresses) != 1:
        raise ValueError(f"{field} must hold exactly one valid address: {value!r}")
    if not addresses[0].username or not addresses[0].domain:
        raise ValueError(f"{field} must be a user@domain address: {value!r}")
    return addresses[0].addr_spec


def _is_verbatim(name: str) -> bool:
    # Look the class up directly: _REGISTRY[name] builds a new class per call.
    parser = _REGISTRY.registry.get(name.lower(), _REGISTRY.default_class)
    return name.lower() == "message-id" or issubclass(parser, headerregistry.UnstructuredHeader)


class _WirePolicy(EmailPolicy):
    """``email.policy.SMTP`` that writes Message-ID verbatim and folds unstructured
    headers itself (see the module docstring). Other headers fold as usual."""

    def header_store_parse(self, name: str, value: Any) -> tuple[str, Any]:
        # Keep the raw string: the registry's parsers rewrite what they do not
        # understand (an odd Message-ID is cut short, "=?...?=" text is decoded).
        if type(value) is str and _is_verbatim(name):
            if _BAD_HEADER_CHARS.search(value):
                raise ValueError(f"{name} may not contain line breaks or control characters")
            return name, value
        return super().header_store_parse(name, value)

    def fold(self, name: str, value: str) -> str:
        if type(value) is str and _is_verbatim(name):
            return _fold_verbatim(name, value, self.linesep)
        folded: str = super().fold(name, value)
        return folded

    def fold_binary(self, name: str, value: str) -> bytes:
        if type(value) is str and _is_verbatim(name):
            return _fold_verbatim(name, value, self.linesep).encode("ascii")
        return super().fold_binary(name, value)


WIRE_POLICY = _WirePolicy(linesep="\r\n", cte_type="7bit")


def _fold_verbatim(name: str, value: str, linesep: str) -> str:
    if name.lower() == "message-id":
        return f"{name}: {value}{linesep}"
    tokens = re.findall(r"[ \t]*[^ \t]+|[ \t]+$", value)
    plain = (
        value.isascii()
        and value.isprintable()
        and "=?" not in value  # would be read back as an RFC 2047 encoded-word
        # A line may hold a whole token past the fold point: keep it under 998.
        and all(len(name) + 2 + _FOLD_AT + len(token) <= _MAX_LINE for token in tokens)
    )
    return _fold_plain(name, tokens, linesep) if plain else _fold_encoded(name, value, linesep)


def _fold_plain(name: str, tokens: list[str], linesep: str) -> str:
    """Fold before whitespace (unfolding restores the value exactly)."""
    lines: list[str] = []
    line = f"{name}: " + (tokens[0] if tokens else "")
    for piece in tokens[1:]:
        # Fold only before whitespace and never leave a whitespace-only line.
        if len(line) + len(piece) > _FOLD_AT and piece[0] in " \t" and piece.strip():
            lines.append(line)
            line = piece
        else:
            line += piece
    lines.append(line)
    return linesep.join(lines) + linesep


def _fold_encoded(name: str, value: str, linesep: str) -> str:
    """One base64 RFC 2047 encoded-word per line, split between characters.

    Decoders drop the folding whitespace between adjacent encoded-words, so the
    split adds no spaces; each word decodes alone since no character is cut.
    """
    overhead = len("=?utf-8?b??=")
    lines: list[str] = []
    # The first word stays on the name's line, even past 76 characters for an
    # absurdly long name: parsers keep the whitespace of a fold right after ":".
    room = max(_MAX_ENCODED_LINE - len(name) - 2, overhead + 8)  # 8: one 4-byte character
    chunk = b""
    for char in value:
        encoded = char.encode("utf-8")
        if chunk and 4 * -(-(len(chunk) + len(encoded)) // 3) > room - overhead:
            lines.append(_encoded_word(chunk))
            room, chunk = _MAX_ENCODED_LINE - 1, b""
        chunk += encoded
    lines.append(_encoded_word(chunk))
    return f"{name}: " + f"{linesep} ".join(lines) + linesep


def _encoded_word(chunk: bytes) -> str:
    return "=?utf-8?b?" + base64.b64encode(chunk).decode("ascii") + "?="
