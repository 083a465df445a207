"""Checks every enqueue input before anything touches the database.

Each function raises :class:`~mailout.exceptions.InvalidMessage` naming the field.
They are pure: no I/O beyond an optional look at the template folder.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping
from email import headerregistry
from pathlib import Path
from typing import Any

from email_validator import SPECIAL_USE_DOMAIN_NAMES, EmailNotValidError, validate_email
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES, DOT_ATOM_TEXT

from mailout import mime
from mailout.exceptions import ConfigError, InvalidMessage
from mailout.models import Attachment, Mailbox
from mailout.templates import template_exists, validate_locale, validate_template_name

KEY_MAX = 255
QUEUE_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# RFC 5322 field names: printable ASCII except the colon.
HEADER_NAME_RE = re.compile(r"[!-9;-~]{1,76}")
PRIORITY_RANGE = range(-32768, 32768)  # the column is a SMALLINT
# Params nest at most this deep: far more than any template reads, far less than
# Python's recursion limit (JSON encoders and decoders recurse too).
PARAMS_MAX_DEPTH = 64
# An ASCII host name of two or more labels: the only domain shape the fast path of
# address() takes; everything else goes through email-validator in full.
_PLAIN_DOMAIN_RE = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_ADDRESS_MAX = 254  # RFC 5321 section 4.5.3.1.3 (as email-validator counts it)
_SPECIAL_MAILBOXES = frozenset(CASE_INSENSITIVE_MAILBOX_NAMES)
# Built once: json.dumps() with any option builds a new encoder on every call.
_PARAMS_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)

# Every character str.splitlines() breaks on, plus the other C0 controls and DEL:
# any of them in a header value is an injection attempt or a rendering bug.
BAD_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
# Fields that servers and signers add on the way (RFC 5322 3.6.6-3.6.7, RFC 6376,
# RFC 8617): given at enqueue they would forge a message's history or signature.
TRACE_HEADERS = frozenset({"received", "dkim-signature", "arc-seal",
                           "arc-message-signature", "arc-authentication-results",
                           "authentication-results", "received-spf"})
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


def address(field: str, value: object) -> str:
    """A bare e-mail address, checked for syntax (no DNS) and normalised.

    The result is email-validator's ``normalized`` form with the domain in its ASCII
    (IDNA) form, as it is sent without SMTPUTF8; a local part that is not ASCII is
    refused, as are special-use domains unless ``MAILOUT_ALLOW_SPECIAL_DOMAINS``
    names them. Plain ASCII addresses (a dot-atom local part at a plain host name,
    the vast majority) take a fast path that validates each distinct domain once; a
    test checks it against email-validator over generated addresses.
    """
    raw = text(field, value, header=True, allow_empty=False)
    fast = _plain_address(raw)
    if fast is not None:
        return fast
    try:
        checked = validate_email(raw, check_deliverability=False)
    except EmailNotValidError as exc:
        reason = str(exc)
        if SPECIAL_USE_REFUSAL not in reason:
            raise InvalidMessage(field, f"not a valid address: {reason}") from None
    else:
        return _ascii_form(field, checked.local_part, checked.ascii_domain)
    allowed = _allowed_special_use(raw)
    if allowed is None:
        raise InvalidMessage(field, f"not a valid address: {reason} Special-use domains "
                             f"are refused unless named in {ALLOW_SPECIAL_SETTING} (e.g. "
                             "test,localhost for staging)") from None
    return allowed


def _ascii_form(field: str, local: str, ascii_domain: str) -> str:
    """The address as it goes on the wire without SMTPUTF8: the domain in its ASCII
    (IDNA) form, ``bücher.example`` and ``xn--bcher-kva.example`` alike. A local
    part that is not ASCII cannot be sent that way: refused here, not at send time."""
    if not local.isascii():
        raise InvalidMessage(field, "the part before the @ is not ASCII; that needs "
                             "SMTPUTF8, which mailout does not send")
    return f"{local}@{ascii_domain}"


# email-validator's words for a domain under a special-use name (.test, .localhost...).
SPECIAL_USE_REFUSAL = "special-use or reserved name"
ALLOW_SPECIAL_SETTING = "MAILOUT_ALLOW_SPECIAL_DOMAINS"
# What the setting may name: email-validator's special-use names, and the two other
# names staging systems use that it already accepts.
SPECIAL_USE_NAMES = frozenset({*SPECIAL_USE_DOMAIN_NAMES, "internal", "example"})
_LABEL_RE = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_STAND_IN_DOMAIN = "mailout-check.example.com"  # a domain email-validator accepts


def allowed_special_domains(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The special-use names ``MAILOUT_ALLOW_SPECIAL_DOMAINS`` allows (``test,localhost``).
    Raises ConfigError for a name that is not a special-use one."""
    raw = (os.environ if env is None else env).get(ALLOW_SPECIAL_SETTING, "")
    names = frozenset(n.strip().lower().strip(".") for n in raw.split(",") if n.strip())
    unknown = sorted(names - SPECIAL_USE_NAMES)
    if unknown:
        raise ConfigError(ALLOW_SPECIAL_SETTING, f"{', '.join(unknown)}: not a special-use "
                          f"name (choose from {', '.join(sorted(SPECIAL_USE_NAMES))})")
    return names


@functools.lru_cache(maxsize=1)
def _process_allowed_special() -> frozenset[str]:
    """The setting as this process read it on first use (addresses are checked often)."""
    return allowed_special_domains()


def _allowed_special_use(raw: str) -> str | None:
    """``raw`` normalised, when its domain is under a special-use name the setting
    allows and the rest of it is valid; None otherwise."""
    local, _, domain = raw.rpartition("@")
    labels = domain.lower().rstrip(".").split(".")
    if labels[-1] not in _process_allowed_special():
        return None
    if not all(_LABEL_RE.fullmatch(label) for label in labels) or len(domain) > 253:
        return None
    try:  # the local part, checked as at any other domain
        checked = validate_email(f"{local}@{_STAND_IN_DOMAIN}", check_deliverability=False)
    except EmailNotValidError:
        return None
    return f"{checked.local_part}@{'.'.join(labels)}"


def _plain_address(raw: str) -> str | None:
    """email-validator's normalised form of ``raw`` if it is a plain ASCII address
    whose normalisation only lower-cases the domain; None means "ask in full".

    Such a local part is returned unchanged by email-validator (it is ASCII
    dot-atom and not one of the case-insensitive role names it lower-cases), and
    the length checks reduce to the length of ``raw``: nothing else changes size.
    """
    local, at, domain = raw.partition("@")
    if (not at or len(raw) > _ADDRESS_MAX or not DOT_ATOM_TEXT.match(local)
            or not _PLAIN_DOMAIN_RE.fullmatch(domain)
            or local.lower() in _SPECIAL_MAILBOXES):
        return None
    checked = _plain_domain(domain)
    # An IDNA ("xn--") domain comes back in Unicode: not the same length, so ask in full.
    return f"{local}@{checked}" if checked == domain.lower() else None


@functools.lru_cache(maxsize=4096)
def _plain_domain(domain: str) -> str | None:
    """The normalised domain, or None when email-validator refuses it.

    Cached: bulk mail goes to few domains, and the domain check (IDNA, special-use
    names, the TLD) is most of email-validator's cost. Changing email-validator's
    module-level settings at run time is not seen by domains already cached.
    """
    try:
        return validate_email(f"x@{domain}", check_deliverability=False).domain
    except EmailNotValidError:
        return None


def mailbox(field: str, value: object) -> str:
    """An address with an optional display name (``Shop <shop@example.com>``).

    Read with the renderer's parser (:func:`parse_mailbox`), so that what enqueue
    accepts the worker can render; the address is then normalised like any other.
    The result is written so that it parses back to the same name and address.
    """
    raw = text(field, value, header=True, allow_empty=False)
    name, addr = parse_mailbox(field, raw)
    checked = address(field, addr)
    if not name:
        return checked
    formatted = str(Mailbox(checked, name))  # quoted where the name needs it
    if parse_mailbox(field, formatted) != (name, checked):
        raise InvalidMessage(field, f"the display name cannot be written back as given: {raw!r}")
    _rendered(field, lambda: mime.address("From", [(name, checked)]))
    return formatted


# -- the renderer's address parsing, shared with enqueue ---------------------------
# The worker renders From, To and address-holding extra headers with the functions
# below; enqueue validates with the same ones, so a message it accepts cannot fail
# to render on its addresses (and never reaches the worker as a poison message).

# Extras that hold addresses: non-ASCII display names there need encoded-words
# around the name only, never around the address.
ADDRESS_HEADERS = frozenset({"reply-to", "sender", "resent-from", "resent-sender",
                             "resent-to", "resent-cc", "resent-bcc"})
# A plain address (dot-atom@dot-atom) needs no parser: the stdlib's would return it
# unchanged. Anything else (display names, quoting, literals) takes the slow path.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_SIMPLE_ADDRESS = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*")
_REGISTRY = headerregistry.HeaderRegistry()
_Parsed = tuple[tuple[tuple[str, str, str, str], ...], bool]  # (name, addr, user, domain)s, defects


def parse_mailbox(field: str, value: str) -> tuple[str, str]:
    """(display name, bare address) of a single-mailbox value (From, To).

    Raises InvalidMessage (a ValueError) for a line break or control character,
    several addresses or none, a defect, a non-ASCII address (no SMTPUTF8 support),
    an address without a user or a domain, or an input the parser fails on.
    """
    if _SIMPLE_ADDRESS.fullmatch(value):
        return "", value
    if BAD_HEADER_CHARS.search(value):
        raise InvalidMessage(field, "contains a line break or control character")
    return _parsed_mailbox(field, value)


@functools.lru_cache(maxsize=1024)  # senders repeat; the stdlib parser is slow
def _parsed_mailbox(field: str, value: str) -> tuple[str, str]:
    found, defects = _parse(field, value)
    if len(found) == 1 and not found[0][1].isascii():
        raise InvalidMessage(field, f"must be an ASCII address (no SMTPUTF8 support): {value!r}")
    if defects or len(found) != 1:
        raise InvalidMessage(field, f"must hold exactly one valid address: {value!r}")
    name, addr, user, domain = found[0]
    if not user or not domain:
        raise InvalidMessage(field, f"must be a user@domain address: {value!r}")
    return name, addr


def extra_header(name: str, value: str) -> str:
    """One extra header line, as the renderer writes it. Address headers
    (:data:`ADDRESS_HEADERS`) keep their addresses readable: they are parsed and
    each display name is encoded on its own. Raises InvalidMessage for an address
    header that is not a valid ASCII address list."""
    if name.lower() not in ADDRESS_HEADERS or (
        value.isascii() and value.isprintable() and "=?" not in value
    ):
        return mime.unstructured(name, value)
    found, defects = _parse(name, value)
    mailboxes = [(display, addr) for display, addr, _, _ in found]
    if defects or not mailboxes or not all(a.isascii() for _, a in mailboxes):
        raise InvalidMessage(name, f"extra header {name!r} is not a valid ASCII address list")
    return _rendered(name, lambda: mime.address(name, mailboxes))


def _parse(field: str, value: str) -> _Parsed:
    """The stdlib's RFC 5322 address-list parser, every failure an InvalidMessage."""
    try:
        header = _REGISTRY("To", value)  # every address header parses alike
        assert isinstance(header, headerregistry.AddressHeader)  # "To" always is
        found = tuple((a.display_name, a.addr_spec, a.username, a.domain)
                      for a in header.addresses)
        return found, bool(header.defects)
    except Exception:  # the parser itself fails on some input (IndexError on " :;:ü")
        raise InvalidMessage(field, f"cannot be read as an address list: {value!r}") from None


def _rendered(field: str, write: Any) -> str:
    """``write()``'s header line; a failure there is the input's, as an InvalidMessage."""
    try:
        line: str = write()
    except Exception as exc:  # any failure to write it means: refuse it
        raise InvalidMessage(field, f"cannot be written as a header: {exc}") from None
    return line


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
    """Extra headers: a mapping of field names to single-line values."""
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
        if name.lower() in ADDRESS_HEADERS:
            extra_header(name, out[name])  # as the worker will write it
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


# -- complete messages: recipients, attachments, unsubscribe, locale ------------

_ADDRESS_ARGUMENTS = {"to": "to", "cc": "cc", "bcc": "bcc", "reply-to": "reply_to"}
# Printable ASCII but "<", ">" and space: what fits between the angle brackets of
# List-Unsubscribe unchanged.
_URI_RE = re.compile(r"[!-;=?-~]+")
_UNSUBSCRIBE_MAX = 2000
_FILENAME_MAX = 255
_CONTENT_TYPE_RE = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+")
_CID_RE = re.compile(r"[!-;=?-~]{1,255}")  # printable ASCII but "<" and ">"
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def mailboxes(field: str, value: object) -> list[tuple[str, str]]:
    """One address or a list of them, as (display name, normalised address) pairs.

    Each item is a string holding exactly one mailbox (``bob@example.com``,
    ``"Doe, John" <john@example.com>``) or a :class:`~mailout.models.Mailbox`, whose
    name is taken exactly as given. Display names are kept exactly; a string with
    two addresses is refused (pass a list), and so is an empty list.
    """
    items = [value] if isinstance(value, str | Mailbox) else value
    if not isinstance(items, list | tuple) or not items:
        raise InvalidMessage(field, "give an address or a non-empty list of addresses")
    return [_one_mailbox(field, item) for item in items]


def _one_mailbox(field: str, item: object) -> tuple[str, str]:
    if isinstance(item, Mailbox):
        name = text(field, item.name, header=True)
        if _CONTROL_RE.search(name):
            raise InvalidMessage(field, f"display name {name!r} has a control character")
        return name, address(field, item.address)
    raw = text(field, item, header=True, allow_empty=False)
    if _CONTROL_RE.search(raw):
        raise InvalidMessage(field, "contains a control character")
    if "<" not in raw and "," not in raw and '"' not in raw:
        return "", address(field, raw.strip())
    found, defects = _parse(field, raw)
    if len(found) != 1 or defects:
        raise InvalidMessage(field, f"must hold exactly one valid address (pass a list for "
                             f"several): {raw!r}")
    return found[0][0], address(field, found[0][1])


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
    if len(name) > _FILENAME_MAX or _CONTROL_RE.search(name) or "/" in name or "\\" in name:
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
