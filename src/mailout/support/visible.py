"""Text from outside shown to people: every control character written out.

Subjects, keys, addresses, reasons and SMTP replies come from outside (callers,
servers, anyone on the network path before STARTTLS). Printed raw, an ESC or OSC
sequence in them drives the reader's terminal (retitles it, plants a link, hides
lines), and a line break forges a log line. The terminal output
(:mod:`mailout.cli.terminal`) and the text log format both go through here.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), the
# Unicode line and paragraph separators, and the bidi overrides that reorder what
# follows them on screen; and lone surrogates, which is how undecodable bytes of a
# peer's reply arrive (surrogateescape): written back to a terminal they are the raw
# bytes again, 0x9b among them.
_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _written_out(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def clean(value: object) -> str:
    """``value`` as text with every control character written out (ESC as ``\\x1b``);
    None as ``-``. Tabs and line breaks stay."""
    return _CONTROL.sub(_written_out, "-" if value is None else str(value))


def one_line(value: object) -> str:
    """:func:`clean`, with tabs and line breaks written out too: one line, always."""
    return clean(value).replace("\t", "\\t").replace("\r", "\\r").replace("\n", "\\n")
