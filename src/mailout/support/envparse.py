"""Parsers for settings given as text (environment variables, URL query values).

Each parser takes the setting's name and its raw text and returns the value, or
raises :class:`~mailout.exceptions.ConfigError` naming the setting. Shared by
``mailout.worker.config`` and each transport's own settings, so every setting reads alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

from mailout.exceptions import ConfigError

Parser = Callable[[str, str], Any]
E = TypeVar("E", bound=StrEnum)

# The longest duration a setting in seconds may name: 100 years. Far longer than any
# age limit, lease or backoff means, and short enough that "now plus it" is still a
# date every database and Python's datetime can hold (1e300 used to pass the check
# and then fail every enqueue).
MAX_SECONDS = 100 * 365 * 86400


def number(kind: type[int] | type[float], *, minimum: float, strict: bool = False,
           maximum: float | None = None) -> Parser:
    """A parser of whole numbers (``int``) or numbers (``float``) of at least ``minimum``
    (greater than it with ``strict``), and at most ``maximum`` when given."""

    def parse(name: str, raw: str) -> Any:
        noun = "a whole number" if kind is int else "a number"
        try:
            value = kind(raw)
        except ValueError:
            raise ConfigError(name, f"must be {noun}, got {raw!r}") from None
        # float() takes "nan" and "inf": a NaN passes every comparison below, and an
        # endless lease or age limit is never what a deployment means.
        if not math.isfinite(value):
            raise ConfigError(name, f"must be {noun}, got {raw!r}")
        if value < minimum or (strict and value == minimum):
            bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
            raise ConfigError(name, f"must be {bound}, got {raw}")
        if maximum is not None and value > maximum:
            raise ConfigError(name, f"must be at most {maximum:g}, got {raw}")
        return value

    return parse


def seconds(name: str, raw: str) -> float:
    """A duration in seconds: a number greater than 0 and at most :data:`MAX_SECONDS`."""
    return float(_SECONDS(name, raw))


_SECONDS = number(float, minimum=0, strict=True, maximum=MAX_SECONDS)


def choice(kind: type[E]) -> Callable[[str, str], E]:
    """A parser of one of ``kind``'s values (a str enum), in any case, blanks around
    ignored; the error lists the values (``must be a, b or c, got 'x'``)."""
    values = [member.value for member in kind]
    listed = f"{', '.join(values[:-1])} or {values[-1]}" if len(values) > 1 else values[0]

    def parse(name: str, raw: str) -> E:
        try:
            return kind(raw.strip().lower())
        except ValueError:
            raise ConfigError(name, f"must be {listed}, got {raw!r}") from None

    return parse


def text(name: str, raw: str) -> str:
    """Any text, as given."""
    return raw


def boolean(name: str, raw: str) -> bool:
    """true/false, yes/no, on/off or 1/0, in any case."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(name, f"must be true or false, got {raw!r}")
