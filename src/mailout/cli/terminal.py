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
import re
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), the
# Unicode line and paragraph separators, and the bidi overrides that reorder what
# follows them on screen.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def clean(value: object) -> str:
    """``value`` as text with every control character written out (ESC as ``\\x1b``);
    None as ``-``. For lines printed without Rich (``click.echo``)."""
    return _CONTROL.sub(_visible, "-" if value is None else str(value))


def one_line(value: object) -> str:
    """:func:`clean`, with tabs and line breaks written out too: for one table cell
    or one line of a report."""
    return clean(value).replace("\t", "\\t").replace("\r", "\\r").replace("\n", "\\n")


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
