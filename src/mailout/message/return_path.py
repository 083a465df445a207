"""The envelope sender of a message: ``MAILOUT_RETURN_PATH``, one address per outbox row,
so that a bounce that reaches it says which row it is about (VERP).

The renderer writes a row's return path into its envelope; the bounce parser and
ingest read the row back out of the address a bounce came to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mailout.exceptions import ConfigError


@dataclass(frozen=True)
class ReturnPath:
    """``MAILOUT_RETURN_PATH``: a per-message envelope sender such as
    ``bounces+{id}@shop.example``. Raises ConfigError for a template without exactly
    one ``{id}`` or with characters an address cannot hold."""

    template: str
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.template.count("{id}") != 1 or "@" not in self.template:
            raise ConfigError("MAILOUT_RETURN_PATH",
                              "must be an address with one {id}, e.g. bounces+{id}@shop.example")
        if re.search(r"[\s<>()\[\],;:\"\\]|[^\x21-\x7e]", self.template.replace("{id}", "1")):
            raise ConfigError("MAILOUT_RETURN_PATH", "has characters an address cannot hold")
        before, after = self.template.lower().split("{id}")
        pattern = re.compile(re.escape(before) + r"(\d{1,18})" + re.escape(after))
        object.__setattr__(self, "_pattern", pattern)

    def for_row(self, row_id: int) -> str:
        """The envelope sender for outbox row ``row_id``."""
        return self.template.replace("{id}", str(row_id))

    def row_id(self, address: str | None) -> int | None:
        """The row id a bounce address carries, or None if it is not one of ours."""
        if not address:
            return None
        match = self._pattern.fullmatch(address.strip().strip("<>").lower())
        return int(match.group(1)) if match else None
