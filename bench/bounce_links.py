"""Whether non-RFC bounces link back to our message: ``python -m bench.bounce_links CORPUS``.

A plain-text bounce (qmail, Exim, Postfix text, a provider's own words) acts only when
it links to an outbox row: by the returned original's Message-ID, or by the signed VERP
return path it was sent to (:mod:`mailout.feedback.ingest`). For every message of
CORPUS (a directory, e.g. set-of-emails' ``maildir/bsd``) that is in no RFC format and
from which mailout reads a recipient Sisimai also finds (a recoverable address):

- Message-ID: where Sisimai finds the original's Message-ID, whether an event for that
  recipient carries the same one (what ingestion looks up);
- VERP: the bounce as it would reach us had we sent the original with
  ``MAILOUT_RETURN_PATH``: its envelope headers (``To``, which an MTA addresses to the
  original's envelope sender, and ``Delivered-To``, ``X-Original-To``, ``Envelope-To``,
  which the receiving MTA adds) name a signed return path for row 4242; it links when an
  event for the recipient carries a return path that verifies to row 4242. The
  original's sender in its own headers is left alone: with VERP it is a different
  address (the ``From``) from the envelope's.

Every miss is printed with what was found instead. Misses listed in
:data:`bench.bounce_disputes.UNLINKED` (a reason each, read from the message) are the
ones that cannot link: they are counted apart, and a listed one that links is stale.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.bounce_corpus import CorpusUnavailable, Sample, load
from bench.bounce_disputes import UNLINKED
from bench.bounces import is_rfc_format, split_mbox

ROW_ID = 4242
_RETURN_PATH = "bounces+{id}@shop.example"
_SECRET = "bench-bounce-links-secret-0123456789"


@dataclass
class Links:
    """The figures (see the module docstring)."""

    recoverable: int = 0  # non-RFC bounces with a recipient read right
    mid_linkable: int = 0  # ... whose original's Message-ID Sisimai finds
    mid_linked: int = 0
    verp_linkable: int = 0  # ... all of them: each can be sent to our return path
    verp_linked: int = 0
    unlinked_listed: int = 0  # misses listed in bench.bounce_disputes.UNLINKED
    stale: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)


def _events(data: bytes, name: str) -> list[Any]:
    from mailout.feedback import dsn

    found: list[Any] = []
    for message in split_mbox(data):
        try:
            found.extend(dsn.parse(message, name))
        except dsn.ReportError:
            continue
    return found


_ENVELOPE = re.compile(rb"^(To|X-Original-To|Delivered-To|Envelope-To):[^\r\n]*"
                       rb"(?:\r?\n[ \t][^\r\n]*)*", re.IGNORECASE | re.MULTILINE)


def to_return_path(data: bytes, address: bytes) -> bytes:
    """The bounce as delivered to ``address``: the headers MTAs write the envelope
    recipient into (``To``, which a bounce addresses to the envelope sender of the
    original, and the receiving MTA's ``Delivered-To``, ``X-Original-To``,
    ``Envelope-To``) say ``address``, in each message of an mbox."""
    out = []
    for message in split_mbox(data):
        head, sep, body = message.partition(b"\n\n")
        if not sep:
            head, sep, body = message.partition(b"\r\n\r\n")
        out.append(_ENVELOPE.sub(lambda m: m.group(1) + b": <" + address + b">", head)
                   + sep + body)
    return b"\n".join(out)


def _bare(message_id: str | None) -> str:
    return (message_id or "").strip().strip("<>").lower()


def measure(samples: list[Sample]) -> Links:
    """Read every non-RFC sample as is and with our VERP address in it."""
    from mailout.message.return_path import ReturnPath

    verp = ReturnPath(_RETURN_PATH, _SECRET)
    ours = verp.for_row(ROW_ID).encode()
    out = Links()
    listed = {(u.file, u.kind): u for u in UNLINKED}
    missed: set[tuple[str, str]] = set()
    for sample in samples:
        expected = {e.address: e for e in sample.expected if e.address}
        if not expected or any(is_rfc_format(m) for m in split_mbox(sample.data)):
            continue
        events = {e.recipient: e for e in _events(sample.data, sample.name)}
        hits = [a for a in expected if a in events]
        if not hits:
            continue
        out.recoverable += 1
        exp = expected[hits[0]]
        if exp.message_id:
            out.mid_linkable += 1
            got = events[hits[0]].message_id
            if _bare(got) == exp.message_id.lower():
                out.mid_linked += 1
            else:
                missed.add((sample.name, "message-id"))
                out.misses.append(f"{sample.name}: Message-ID <{exp.message_id}>, read {got!r}")
        out.verp_linkable += 1
        again = {e.recipient: e for e in _events(to_return_path(sample.data, ours), sample.name)}
        event = again.get(hits[0])
        got = event.return_path if event is not None else None
        if verp.row_id(got) == ROW_ID:
            out.verp_linked += 1
        else:
            missed.add((sample.name, "verp"))
            out.misses.append(f"{sample.name}: VERP, read {got!r}")
    out.unlinked_listed = len(missed & set(listed))
    names = {s.name for s in samples}
    out.stale = [f"{f} {k}" for (f, k) in listed if f in names and (f, k) not in missed]
    return out


def report(name: str, s: Links) -> str:
    def share(part: int, whole: int) -> str:
        return f"{part}/{whole} = {part / whole:.1%}" if whole else f"{part}/0"

    lines = [
        f"corpus {name}: {s.recoverable} non-RFC bounces with a recoverable address",
        f"  Message-ID links {share(s.mid_linked, s.mid_linkable)} of those whose original's "
        "Message-ID Sisimai finds",
        f"  VERP links       {share(s.verp_linked, s.verp_linkable)} of them, delivered to a "
        "signed return path",
        f"  misses listed as unlinkable (bench/bounce_disputes.py UNLINKED): {s.unlinked_listed}"
        f" of {len(s.misses)}",
    ]
    lines.extend(f"  stale UNLINKED entry (links now): {x}" for x in s.stale)
    lines.extend(f"    {m}" for m in s.misses)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bounce_links", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        samples = load(args.corpus)
    except CorpusUnavailable as exc:
        print(f"corpus {args.corpus}: unavailable: {exc}", file=sys.stderr)
        return 2
    result = measure(samples)
    print(json.dumps(asdict(result), indent=2) if args.json else report(args.corpus, result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
