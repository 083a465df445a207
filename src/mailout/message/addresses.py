"""E-mail addresses: checked, normalised and parsed alike at enqueue and at render time.

Owns address syntax and normalisation (email-validator, with a cached fast path for
plain ASCII addresses), the special-use domains (``.test``, ``.localhost``...) that
``MAILOUT_ALLOW_SPECIAL_DOMAINS`` may allow, and the parsing of mailboxes and address
lists shared by enqueue and the renderer, so that what enqueue accepts the worker can
render. Every check raises :class:`~mailout.exceptions.InvalidMessage` naming the
field; a bad ``MAILOUT_ALLOW_SPECIAL_DOMAINS`` is a
:class:`~mailout.exceptions.ConfigError`. Pure: no I/O, no DNS.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from email import headerregistry
from typing import Any

from email_validator import SPECIAL_USE_DOMAIN_NAMES, EmailNotValidError, validate_email
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES, DOT_ATOM_TEXT

from mailout.exceptions import ConfigError, InvalidMessage
from mailout.message import mime
from mailout.message.validate import BAD_HEADER_CHARS, CONTROL_CHARS, text
from mailout.models import Mailbox

# An ASCII host name of two or more labels: the only domain shape the fast path of
# address() takes; everything else goes through email-validator in full.
_PLAIN_DOMAIN_RE = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_ADDRESS_MAX = 254  # RFC 5321 section 4.5.3.1.3 (as email-validator counts it)
_SPECIAL_MAILBOXES = frozenset(CASE_INSENSITIVE_MAILBOX_NAMES)


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


# -- recipient lists: to, cc, bcc and reply_to at enqueue -------------------------


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
        if CONTROL_CHARS.search(name):
            raise InvalidMessage(field, f"display name {name!r} has a control character")
        return name, address(field, item.address)
    raw = text(field, item, header=True, allow_empty=False)
    if CONTROL_CHARS.search(raw):
        raise InvalidMessage(field, "contains a control character")
    if "<" not in raw and "," not in raw and '"' not in raw:
        return "", address(field, raw.strip())
    found, defects = _parse(field, raw)
    if len(found) != 1 or defects:
        raise InvalidMessage(field, f"must hold exactly one valid address (pass a list for "
                             f"several): {raw!r}")
    return found[0][0], address(field, found[0][1])


def normalize_address(raw: str) -> str:
    """An address as stored for matching: trimmed, ``<>`` and ``mailto:`` removed,
    lower-cased. Mailbox local parts are case-sensitive in theory and never in
    practice; suppression must not miss ``Bob@`` because ``bob@`` bounced."""
    value = raw.strip()
    if value.lower().startswith("mailto:"):
        value = value[7:]
    if value.lower().startswith("rfc822;"):
        value = value[7:]
    return value.strip().strip("<>").strip().lower()
