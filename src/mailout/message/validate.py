"""Checks the enqueue inputs before anything touches the database: text and header
values, keys, queues, priorities, template names and params, extra header names,
sizes, unsubscribe links, locales and attachments. Addresses are checked and parsed
in :mod:`mailout.message.addresses`, which builds on :func:`text` and the character sets here.

Each function raises :class:`~mailout.exceptions.InvalidMessage` naming the field.
They are pure: no I/O beyond an optional look at the template folder.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mailout.exceptions import InvalidMessage
from mailout.message.templates import template_exists, validate_locale, validate_template_name
from mailout.models import Attachment

KEY_MAX = 255
QUEUE_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# RFC 5322 field names: printable ASCII except the colon.
HEADER_NAME_RE = re.compile(r"[!-9;-~]{1,76}")
PRIORITY_RANGE = range(-32768, 32768)  # the column is a SMALLINT
# Params nest at most this deep: far more than any template reads, far less than
# Python's recursion limit (JSON encoders and decoders recurse too).
PARAMS_MAX_DEPTH = 64
# Built once: json.dumps() with any option builds a new encoder on every call.
_PARAMS_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)

# Every character str.splitlines() breaks on, plus the other C0 controls and DEL:
# any of them in a header value is an injection attempt or a rendering bug.
BAD_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
# The same and the tab: a display name or a filename has no use for any control
# character, and one there garbles what a mail client or a file system shows.
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
# Fields that servers and signers add on the way (RFC 5322 3.6.6-3.6.7, RFC 6376,
# RFC 8617, and the delivering MTA's Delivered-To / X-Original-To, which mail loops
# and filters rely on): given at enqueue they would forge a message's history.
TRACE_HEADERS = frozenset({"received", "dkim-signature", "arc-seal",
                           "arc-message-signature", "arc-authentication-results",
                           "authentication-results", "received-spf", "delivered-to",
                           "x-original-to"})
# Headers mailout writes itself; letting extras set them would break tracing or MIME.
RESERVED_HEADERS = frozenset(
    {"message-id", "from", "to", "cc", "bcc", "subject", "date", "mime-version", "sender",
     "reply-to-original", "return-path"}
)


def text(field: str, value: object, *, header: bool = False, allow_empty: bool = True) -> str:
    """A string that every database and the wire can carry.

    Refuses non-strings, NUL characters (PostgreSQL rejects them), lone surrogates
    (not encodable as UTF-8), and, for values that end up in a header, every line
    break and control character the renderer refuses (:data:`BAD_HEADER_CHARS`: CR
    and LF would inject headers, U+2028, VT, FF, ESC... would fail at send time).
    """
    if not isinstance(value, str):
        raise InvalidMessage(field, f"must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidMessage(field, "contains a NUL character")
    if header and BAD_HEADER_CHARS.search(value):
        raise InvalidMessage(field, "contains a line break or control character, which is "
                             "not allowed in a header")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessage(field, "is not valid Unicode (lone surrogate)") from None
    if not allow_empty and not value.strip():
        raise InvalidMessage(field, "must not be empty")
    return value


def bounded(field: str, value: object, limit: int) -> str:
    """A one-line string of at most ``limit`` characters."""
    raw = text(field, value, header=True, allow_empty=False)
    if len(raw) > limit:
        raise InvalidMessage(field, f"is {len(raw)} characters long, the limit is {limit}")
    return raw


def key(value: object) -> str:
    """An idempotency key: 1-255 printable ASCII characters, trimmed.

    Printable ASCII because the key travels in a header, where anything else would
    need encoding that some providers' deduplication would not undo.
    """
    raw = text("key", value, header=True)
    if raw != raw.strip():
        raise InvalidMessage("key", "must not start or end with whitespace")
    if not raw:
        raise InvalidMessage("key", "must not be empty")
    if len(raw) > KEY_MAX:
        raise InvalidMessage("key", f"is {len(raw)} characters long, the limit is {KEY_MAX}")
    if not (raw.isascii() and raw.isprintable()):  # printable ASCII: " " to "~"
        raise InvalidMessage("key", "must be printable ASCII")
    return raw


def queue(value: object) -> str:
    raw = text("queue", value)
    if not QUEUE_RE.fullmatch(raw):
        raise InvalidMessage("queue", "must be 1-64 characters of letters, digits, _ . -")
    return raw


def priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in PRIORITY_RANGE:
        raise InvalidMessage("priority", "must be an integer from -32768 to 32767")
    return value


def template_name(value: object, templates_dir: Path | None) -> str:
    """A template name; when a template folder is configured, it must exist there."""
    raw = text("template", value, allow_empty=False)
    try:
        validate_template_name(raw)
    except ValueError as exc:
        raise InvalidMessage("template", str(exc)) from None
    if templates_dir is not None and not template_exists(templates_dir, raw):
        raise InvalidMessage("template", f"no template {raw!r} in {templates_dir}")
    return raw


def params(value: object) -> tuple[dict[str, Any], str, int]:
    """Template params: a JSON object that survives a round trip unchanged.

    Returns the params, their JSON text and its size in bytes as UTF-8, for
    :func:`size`.
    """
    if not isinstance(value, Mapping):
        raise InvalidMessage("params", "must be a mapping (a JSON object)")
    encoded = _plainly_json(value)
    if encoded is None:  # the full check, for its precise error or a nested object
        _check_json("params", value, PARAMS_MAX_DEPTH)
        try:
            encoded = _PARAMS_ENCODER.encode(value)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage("params", f"not JSON-serializable: {exc}") from None
    try:
        return dict(value), encoded, len(encoded.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidMessage("params", "is not valid Unicode (lone surrogate)") from None


def _plainly_json(value: Mapping[Any, Any]) -> str | None:
    """The JSON text of ``value`` when it plainly passes :func:`_check_json`, found
    without walking it in Python: the C encoder refuses other types, NaN, cycles and
    very deep nesting; no ``\\u0000`` in its output means no NUL; fewer brackets than
    the depth limit bound the nesting; and with no object below the top one, the top
    one's keys are all the keys there are. None: walk it (a nested object, or a
    refusal to explain)."""
    try:
        encoded = _PARAMS_ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):  # the walk says which, in its words
        return None
    objects = encoded.count("{")
    if objects != 1 or objects + encoded.count("[") >= PARAMS_MAX_DEPTH \
            or "\\u0000" in encoded or not all(isinstance(k, str) for k in value):
        return None
    return encoded


def _check_json(field: str, value: object, depth: int) -> None:
    """Refuse what JSON cannot carry unchanged, and nesting deeper than ``depth``
    (a structure that contains itself is infinitely deep). Lone surrogates are left
    to the caller's UTF-8 encoding of the whole document, which finds them in one pass."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidMessage(field, "contains a NUL character")
        return
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidMessage(field, "contains NaN or infinity, which JSON cannot hold")
        return
    if isinstance(value, Mapping | list | tuple) and depth <= 0:
        raise InvalidMessage(field, f"is nested more than {PARAMS_MAX_DEPTH} levels deep "
                             "(or contains itself)")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidMessage(field, f"has a non-string key {k!r}")
            _check_json(field, k, depth - 1)
            _check_json(field, v, depth - 1)
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json(field, item, depth - 1)
        return
    raise InvalidMessage(field, f"not JSON-serializable: {type(value).__name__}")


def headers(value: object) -> dict[str, str]:
    """Extra headers: a mapping of field names to single-line values.

    Names and characters only: :func:`mailout.message.compose.headers` then checks that an
    address header (Reply-To) can be written as the worker will write it."""
    if not isinstance(value, Mapping):
        raise InvalidMessage("headers", "must be a mapping of header names to values")
    out: dict[str, str] = {}
    for name, val in value.items():
        name = text("headers", name, header=True)
        if not HEADER_NAME_RE.fullmatch(name):
            raise InvalidMessage("headers", f"{name!r} is not a valid header name")
        argument = header_argument(name)
        if argument is not None and argument != "reply_to":
            raise InvalidMessage("headers", f"{name!r} cannot be given as a header: use the "
                                 f"{argument} argument")
        if name.lower() in RESERVED_HEADERS or name.lower().startswith("content-"):
            raise InvalidMessage("headers", f"{name!r} is set by mailout and cannot be given")
        if name.lower() in TRACE_HEADERS or name.lower().startswith("resent-"):
            raise InvalidMessage("headers", f"{name!r} is a trace, resent or signature field: "
                                 "servers and signers add those, a message never carries "
                                 "its own")
        out[name] = text(f"headers[{name}]", val, header=True)
    return out


def size(fields: Mapping[str, object], limit: int, *, extra: int = 0) -> None:
    """Refuse a message whose content (``fields`` plus ``extra`` bytes counted
    already) is larger than ``limit`` bytes."""
    total = extra
    for val in fields.values():
        if isinstance(val, str):
            total += len(val.encode("utf-8"))
        elif val is not None:
            total += len(json.dumps(val, ensure_ascii=False).encode("utf-8"))
    if total > limit:
        raise InvalidMessage("size", f"the message is {total} bytes, the limit is {limit}")


# -- complete messages: address arguments, unsubscribe, locale, attachments ----------

_ADDRESS_ARGUMENTS = {"to": "to", "cc": "cc", "bcc": "bcc", "reply-to": "reply_to"}
# Printable ASCII but "<", ">" and space: what fits between the angle brackets of
# List-Unsubscribe unchanged.
_URI_RE = re.compile(r"[!-;=?-~]+")
_UNSUBSCRIBE_MAX = 2000
_FILENAME_MAX = 255
_CONTENT_TYPE_RE = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+")
_CID_RE = re.compile(r"[!-;=?-~]{1,255}")  # printable ASCII but "<" and ">"


def header_argument(name: str) -> str | None:
    """The enqueue argument that replaces header ``name`` (To, Cc, Bcc, Reply-To)."""
    return _ADDRESS_ARGUMENTS.get(name.lower())


def unsubscribe(value: object) -> dict[str, str]:
    """The List-Unsubscribe headers for an https URL and/or a mailto: URI (RFC 2369),
    with ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` when there is an
    https URL (RFC 8058 one-click)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not 1 <= len(items) <= 2:
        raise InvalidMessage("unsubscribe", "give an https URL, a mailto: URI, or one of each")
    kinds: list[str] = []
    for item in items:
        uri = text("unsubscribe", item, header=True, allow_empty=False)
        scheme = uri.partition(":")[0].lower()
        if scheme not in ("https", "mailto") or not _URI_RE.fullmatch(uri) or \
                len(uri) > _UNSUBSCRIBE_MAX or uri.rstrip("/").lower() in ("https:", "mailto:"):
            raise InvalidMessage("unsubscribe", f"{uri[:80]!r} is not an https URL or a mailto: "
                                 "URI of printable ASCII (percent-encode the rest)")
        kinds.append(scheme)
    if len(set(kinds)) != len(kinds):
        raise InvalidMessage("unsubscribe", "give at most one https URL and one mailto: URI")
    headers = {"List-Unsubscribe": ", ".join(f"<{u}>" for u in items)}
    if "https" in kinds:
        headers["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    return headers


def locale(value: object) -> str:
    """A BCP 47 language tag (``es-MX``); ``_`` is taken for ``-``."""
    raw = text("locale", value, header=True, allow_empty=False)
    try:
        return validate_locale(raw)
    except ValueError as exc:
        raise InvalidMessage("locale", str(exc)) from None


def attachment(item: object, *, max_bytes: int) -> Attachment:
    """One attachment, checked: a filename without control characters or path
    separators, a ``type/subtype`` content type, a cid of printable ASCII, and at most
    ``max_bytes`` of content. Errors name the file."""
    if not isinstance(item, Attachment):
        raise InvalidMessage("attachments", f"expected mailout.Attachment, not "
                             f"{type(item).__name__}")
    name = text("attachments", item.filename, allow_empty=False)
    if len(name) > _FILENAME_MAX or CONTROL_CHARS.search(name) or "/" in name or "\\" in name:
        raise InvalidMessage("attachments", f"{name[:80]!r}: a filename is at most "
                             f"{_FILENAME_MAX} characters, without control characters or "
                             "path separators")
    if not _CONTENT_TYPE_RE.fullmatch(item.content_type):
        raise InvalidMessage("attachments", f"{name!r}: content type "
                             f"{item.content_type[:80]!r} is not type/subtype")
    if item.cid is not None and not _CID_RE.fullmatch(item.cid):
        raise InvalidMessage("attachments", f"{name!r}: cid {item.cid[:80]!r} must be "
                             "printable ASCII without spaces or <>; give one with cid=")
    if len(item.content) > max_bytes:
        raise InvalidMessage("attachments", f"{name!r} is {len(item.content)} bytes, the limit "
                             f"per attachment is {max_bytes} (MAILOUT_MAX_ATTACHMENT_BYTES)")
    return Attachment(name, item.content, item.content_type.lower(), item.inline, item.cid)
