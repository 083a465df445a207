"""The envelope sender of a message: ``MAILOUT_RETURN_PATH``, one address per outbox row,
so that a bounce that reaches it says which row it is about (VERP).

The renderer writes a row's return path into its envelope; the bounce parser and
ingest read the row back out of the address a bounce came to. The address is signed
(``MAILOUT_RETURN_PATH_SECRET``), so that nobody else can write one that names a row.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

from mailout.exceptions import ConfigError

RETURN_PATH_TAG_CHARS = 16  # hex digits of the HMAC in a signed return path: 64 bits
RETURN_PATH_SECRET_MIN_CHARS = 16
_TAG_CONTEXT = b"mailout return path\x00"


@dataclass(frozen=True)
class ReturnPath:
    """``MAILOUT_RETURN_PATH``: a per-message envelope sender such as
    ``bounces+{id}@shop.example``, signed with ``MAILOUT_RETURN_PATH_SECRET``.

    ``{id}`` becomes ``<row id>-<tag>``: the tag is an HMAC-SHA256 of the row id keyed by
    the secret (the first 16 hex digits), in the manner of BATV and SRS. A bounce links
    to a row by its return path only when the tag verifies: row ids are sequential, and
    anyone can send mail to the bounce address. ``secret`` may hold several secrets
    separated by commas: the first signs, every one verifies (rotation). Raises
    ConfigError for a template without exactly one ``{id}``, with characters an address
    cannot hold, or for a missing or short secret.
    """

    template: str
    secret: str | None = field(default=None, repr=False)
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _keys: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.template.count("{id}") != 1 or "@" not in self.template:
            raise ConfigError("MAILOUT_RETURN_PATH",
                              "must be an address with one {id}, e.g. bounces+{id}@shop.example")
        if re.search(r"[\s<>()\[\],;:\"\\]|[^\x21-\x7e]", self.template.replace("{id}", "1")):
            raise ConfigError("MAILOUT_RETURN_PATH", "has characters an address cannot hold")
        keys = tuple(k.strip().encode() for k in (self.secret or "").split(",") if k.strip())
        if not keys or any(len(k) < RETURN_PATH_SECRET_MIN_CHARS for k in keys):
            raise ConfigError("MAILOUT_RETURN_PATH_SECRET",
                              f"is required with MAILOUT_RETURN_PATH: at least "
                              f"{RETURN_PATH_SECRET_MIN_CHARS} random characters (comma-separated "
                              "to rotate: the first signs), so that bounces cannot be forged")
        before, after = self.template.lower().split("{id}")
        signed = rf"(\d{{1,18}})-([0-9a-f]{{{RETURN_PATH_TAG_CHARS}}})"
        pattern = re.compile(re.escape(before) + signed + re.escape(after))
        object.__setattr__(self, "_pattern", pattern)
        object.__setattr__(self, "_keys", keys)

    def for_row(self, row_id: int) -> str:
        """The envelope sender for outbox row ``row_id``."""
        return self.template.replace("{id}", f"{row_id}-{_tag(self._keys[0], row_id)}")

    def row_id(self, address: str | None) -> int | None:
        """The row id a bounce address carries when its tag verifies, else None."""
        if not address:
            return None
        match = self._pattern.fullmatch(address.strip().strip("<>").lower())
        if match is None:
            return None
        row_id, tag = int(match.group(1)), match.group(2)
        if any(hmac.compare_digest(tag, _tag(key, row_id)) for key in self._keys):
            return row_id
        return None


def _tag(key: bytes, row_id: int) -> str:
    digest = hmac.new(key, _TAG_CONTEXT + str(row_id).encode(), hashlib.sha256).hexdigest()
    return digest[:RETURN_PATH_TAG_CHARS]
