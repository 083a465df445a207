"""Data shown to people on a terminal: never markup, never a control sequence.

Subjects, keys, addresses, reasons and SMTP replies come from outside (callers,
servers, operators). Printed raw, an ESC or OSC sequence in them would drive the
operator's terminal (retitle it, plant a link, hide lines), and a ``[/x]`` in them
would be read as Rich markup and crash the command for every row. Every
human-readable output goes through :func:`clean` (plain text) or the console of
:func:`console` (Rich): control characters are shown escaped (``\\x1b``) and Rich
markup is switched off. ``--json`` output does not come here: it stays exact.
"""

from __future__ import annotations

import io
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

from mailout.support.visible import clean, one_line

__all__ = ["clean", "console", "one_line", "plain"]


def plain(value: object, style: str = "") -> Text:
    """``value`` as a Rich Text that is never read as markup (for styled pieces)."""
    from rich.text import Text

    return Text(clean(value), style=style)


def console(**options: Any) -> Console:
    """A Rich console that reads no markup, no emoji codes and no highlighting in
    strings, and writes every control character in them out (see :func:`clean`).
    Style a piece with :func:`plain` instead of markup."""
    from rich.console import Console

    class _SafeConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Text:
            return super().render_str(clean(text), **kwargs)

    return _SafeConsole(markup=False, emoji=False, highlight=False, **options)


class CleanStream(io.TextIOBase):
    """A text stream that writes to ``stream`` with :func:`clean` applied: for text
    that click formats itself (an error quoting what was typed)."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(clean(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()
