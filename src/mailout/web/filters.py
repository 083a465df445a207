"""The message list's query string, parsed into a :class:`MessageFilter`.

Bad values never raise: each becomes a message shown above the list, and the
filter falls back to "no filter" for that field only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.datastructures import ImmutableMultiDict

from mailout.db.browse import MessageFilter
from mailout.models import Status

SPANS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7),
         "30d": timedelta(days=30)}
FILTER_KEYS = ("status", "queue", "template", "span", "from", "to", "q")


@dataclass(frozen=True)
class ParsedFilter:
    """The filter, the raw values to put back in the form, and what was wrong."""

    filter: MessageFilter
    raw: dict[str, Any]
    errors: list[str] = field(default_factory=list)

    def query(self) -> dict[str, Any]:
        """The filter as query parameters again (for links and hidden fields)."""
        return {k: v for k, v in self.raw.items() if v}


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text.strip())
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse(params: ImmutableMultiDict[str, Any] | Mapping[str, Any],
          now: datetime | None = None, *, sees_addresses: bool = True) -> ParsedFilter:
    """Read ``status`` (repeatable), ``queue``, ``template``, ``span`` (1h, 24h, 7d,
    30d), ``from``/``to`` (ISO date-times, UTC when no zone) and ``q`` (search).

    Without ``sees_addresses`` the search never matches a recipient address, and an
    address searched for is an error saying so."""
    getlist = params.getlist if isinstance(params, ImmutableMultiDict) else (
        lambda k: [params[k]] if k in params else [])
    errors: list[str] = []
    names = {s.value for s in Status}
    statuses = [s for s in (str(v).strip().lower() for v in getlist("status")) if s]
    bad = [s for s in statuses if s not in names]
    if bad:
        errors.append(f"unknown status {', '.join(bad)}")
    statuses = [s for s in statuses if s in names]

    def text(key: str) -> str:
        values = getlist(key)
        return str(values[-1]).strip() if values else ""

    raw: dict[str, Any] = {"status": statuses, **{k: text(k) for k in FILTER_KEYS[1:]}}
    start = end = None
    if raw["span"]:
        if raw["span"] in SPANS:
            start = (now or datetime.now(UTC)) - SPANS[raw["span"]]
        else:
            errors.append(f"unknown time span {raw['span']}")
            raw["span"] = ""
    for key in ("from", "to"):
        if raw[key]:
            try:
                moment = _moment(raw[key])
            except ValueError:
                errors.append(f"{key} is not a date-time (use 2024-05-01T12:00)")
                raw[key] = ""
                continue
            if key == "from":
                start = moment if start is None else max(start, moment)
            else:
                end = moment
    if raw["q"] and "@" in raw["q"] and not sees_addresses:
        errors.append("your role cannot search by recipient address")
    flt = MessageFilter(statuses=tuple(statuses), queue=raw["queue"] or None,
                        template=raw["template"] or None, created_from=start,
                        created_to=end, search=raw["q"] or None,
                        search_recipients=sees_addresses)
    return ParsedFilter(flt, raw, errors)
