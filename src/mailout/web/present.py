"""How values look on the console's pages: the Jinja environment and its filters,
and the sparklines drawn as SVG on the server.

The environment autoescapes everything. On top of that, :func:`visible` shows
control characters (ANSI escapes in an SMTP reply, a NUL in a subject) and
bidirectional overrides as visible ``\\x1b``-style escapes instead of passing them
to the browser, where they would hide or reorder text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import jinja2

from mailout.support.logs import mask_address, redact_addresses

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode bidi controls
# and line/paragraph separators that reorder or break text without showing.
_HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(value: object) -> str:
    """``value`` as text with hidden characters spelled out (``\\x1b``, ``\\u202e``)."""
    if value is None:
        return ""
    text = str(value)

    def spell(m: re.Match[str]) -> str:
        code = ord(m.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _HIDDEN.sub(spell, text)


def when(moment: datetime | None) -> str:
    """``2024-05-01 12:00:03Z`` in UTC; ``-`` for none."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def age(seconds: float | None) -> str:
    """``4.2s``, ``12m 5s``, ``3h``, ``2d 4h``; ``-`` for none."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                     ("m", 60, "s", 1)):
        if whole >= size:
            rest = (whole % size) // subsize
            return f"{whole // size}{unit}" + (f" {rest}{sub}" if rest else "")
    return f"{seconds:.1f}s"


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "-"
    ms = (end - start).total_seconds() * 1000
    return f"{ms:.0f} ms" if ms < 10_000 else age(ms / 1000)


def masked(address: str | None, sees_personal: bool) -> str:
    """A recipient as the role may see it (masked like the logs otherwise)."""
    if not address:
        return "-"
    return address if sees_personal else mask_address(address)


def redacted(text: str | None, sees_personal: bool) -> str:
    """Free text (a reply, a key, a subject) with addresses masked unless allowed."""
    if text is None:
        return ""
    return text if sees_personal else redact_addresses(text)


@dataclass(frozen=True, slots=True)
class Sparkline:
    """An SVG polyline for a series of counts, in a ``width`` x ``height`` box."""

    points: str  # "x,y x,y ..." for <polyline points=...>
    area: str  # the same line closed along the bottom, for a filled <polygon>
    peak: int
    total: int
    width: int
    height: int


def sparkline(values: Sequence[int], *, width: int = 120, height: int = 28) -> Sparkline:
    """Scale ``values`` into the box: the peak touches the top, zero the bottom (with
    a pixel of margin so a flat line stays visible). An empty series is flat."""
    series = list(values) or [0]
    peak = max(series)
    step = width / max(len(series) - 1, 1)
    usable = height - 2

    def y(v: int) -> float:
        return 1 + usable - (usable * v / peak if peak else 0)

    coords = [(round(i * step, 1), round(y(v), 1)) for i, v in enumerate(series)]
    points = " ".join(f"{x:g},{yy:g}" for x, yy in coords)
    area = f"0,{height} {points} {coords[-1][0]:g},{height}"
    return Sparkline(points, area, peak, sum(series), width, height)


def environment(loader: jinja2.BaseLoader) -> jinja2.Environment:
    """The console's Jinja environment: autoescape on for every template, undefined
    names are errors, and the filters above."""
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             auto_reload=False)
    env.filters.update(visible=visible, when=when, age=age, duration=duration, masked=masked,
                       redacted=redacted)
    env.globals["sparkline"] = sparkline
    return env
