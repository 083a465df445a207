"""How well mailout reads real bounces: ``python -m bench.bounces [CORPUS ...]``.

CORPUS is ``flufl`` (the default: flufl.bounce's test messages from PyPI) or a directory
of messages, e.g. a checkout of Sisimai's ``set-of-emails/maildir/bsd``. Every message is
parsed as ``mailout bounces ingest`` would, and compared with Sisimai's reading of it
(:mod:`bench.bounce_corpus`). Printed per corpus:

- parsed / refused / crashed: RFC 3464 and RFC 5965 messages (those with a
  ``message/delivery-status`` or ``message/feedback-report`` part) that gave events, that
  were refused, and any message of any kind that raised something other than a refusal,
  also in CRLF, CR and truncated copies;
- address accuracy: of the recipients Sisimai finds in RFC-format messages, those
  mailout reports;
- verdict accuracy: of those, the ones whose hard/soft/complaint verdict agrees;
- status accuracy: of those with an enhanced status code, the ones whose code agrees;
- soft->hard: recipients Sisimai calls soft that mailout calls hard (these would
  suppress a working mailbox), also as a share of Sisimai's soft ones;
- junk addresses: addresses mailout reports that Sisimai does not and that are not
  valid addr-specs;
- non-RFC: messages in no RFC format for which Sisimai finds a recipient; how many
  mailout reads with the right address, and how many of those carry a Message-ID or a
  return path to link them by; for the recipients read right, the verdicts that agree
  and the soft->hard count (:mod:`bench.bounce_links` measures the linking itself).

Each figure is printed as measured against Sisimai, and where Sisimai is judged wrong
(:data:`bench.bounce_disputes.DISPUTED`, a case and a reason each, read by hand from the
message) again with those cases counted for mailout. A listed case that no longer
disagrees as listed is printed as stale.

A file that is an mbox of several messages (it starts with a ``From`` line) is read as
such, as Sisimai reads it.

``--verbose`` lists every disagreement. ``--json`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from email.message import Message
from typing import Any

from bench.bounce_corpus import (
    VERDICT_AUTH_FAILURE,
    VERDICT_COMPLAINT,
    VERDICT_HARD,
    VERDICT_NONE,
    VERDICT_SOFT,
    CorpusUnavailable,
    Sample,
    load,
)
from bench.bounce_disputes import DISPUTED, Disputed

_REPORT_TYPES = frozenset({"message/delivery-status", "message/global-delivery-status",
                           "message/feedback-report"})
_STATUS = re.compile(r"\b[245]\.\d{1,3}\.\d{1,3}\b")
_ADDR_SPEC = re.compile(r"[^\s@<>()\[\],;:\"]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


@dataclass
class Score:
    """The figures for one corpus (see the module docstring)."""

    messages: int = 0
    rfc_format: int = 0
    parsed: int = 0
    refused: int = 0
    crashed: int = 0
    variants: int = 0  # copies parsed for crashes (CRLF, CR, truncated)
    recipients: int = 0
    addresses_right: int = 0
    verdicts_judged: int = 0
    verdicts_right: int = 0
    statuses_judged: int = 0
    statuses_right: int = 0
    oracle_soft: int = 0
    soft_to_hard: int = 0
    hard_verdicts: int = 0
    hard_right: int = 0
    junk_addresses: int = 0
    complaints_to_linked: int = 0
    non_rfc_with_address: int = 0
    non_rfc_read: int = 0
    non_rfc_linkable: int = 0
    non_rfc_verdicts_judged: int = 0  # of the recipients read right
    non_rfc_verdicts_right: int = 0
    non_rfc_oracle_soft: int = 0
    non_rfc_soft_to_hard: int = 0
    non_rfc_verdicts_disputed: int = 0
    non_rfc_soft_to_hard_disputed: int = 0
    mailman_expected: int = 0
    mailman_found: int = 0
    # Disagreements listed in bench.bounce_disputes, counted for mailout.
    refused_disputed: int = 0
    addresses_disputed: int = 0
    verdicts_disputed: int = 0
    soft_to_hard_disputed: int = 0
    disputes_used: list[str] = field(default_factory=list)
    stale_disputes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def share(self, part: int, whole: int) -> str:
        return f"{part}/{whole} = {part / whole:.1%}" if whole else f"{part}/0"


def _parser() -> Any:
    """The module with ``parse`` and ``ReportError``."""
    from mailout.feedback import dsn

    return dsn


def is_rfc_format(data: bytes) -> bool:
    """Whether the message has an RFC 3464 or RFC 5965 report part (iterative walk)."""
    import email

    try:
        stack: list[Any] = [email.message_from_bytes(data)]
    except Exception:  # unreadable is simply not RFC-format here
        return False
    seen = 0
    while stack and seen < 10_000:
        part = stack.pop()
        seen += 1
        if not isinstance(part, Message):
            continue
        if part.get_content_type() in _REPORT_TYPES:
            return True
        payload = part.get_payload()
        if isinstance(payload, list):
            stack.extend(payload)
    return False


def verdict_of(event: Any) -> str:
    """mailout's verdict on one event, in the oracle's terms."""
    kind = str(event.type)
    if kind == "bounced":
        return VERDICT_HARD if event.subtype == "hard" else VERDICT_SOFT
    if kind == "deferred":
        return VERDICT_SOFT
    if kind == "complained":
        return VERDICT_COMPLAINT
    if kind == "auth_failure":
        return VERDICT_AUTH_FAILURE
    return VERDICT_NONE


def status_of(event: Any) -> str | None:
    found = getattr(event, "status", None)
    if found:
        return str(found)
    match = _STATUS.search(event.diagnostic or "")
    return match.group(0) if match else None


def _dispute(file: str, address: str, kind: str, ours: str) -> Disputed | None:
    for d in DISPUTED:
        if (d.file, d.address, d.kind, d.ours) == (file, address, kind, ours):
            return d
    return None


def _use(s: Score, d: Disputed) -> None:
    s.disputes_used.append(f"{d.file} {d.address} {d.kind}")


def split_mbox(data: bytes) -> list[bytes]:
    """The messages of a file: one, or each of an mbox's (a ``From `` line first)."""
    if not data.startswith(b"From "):
        return [data]
    chunks = re.split(rb"\r?\n(?=From \S+ )", data)
    return [c for c in chunks if c.strip()]


def _variants(data: bytes) -> list[bytes]:
    lf = data.replace(b"\r\n", b"\n")
    return [lf.replace(b"\n", b"\r\n"), lf.replace(b"\n", b"\r"), data[: len(data) // 3],
            data[: 2 * len(data) // 3]]


def score(samples: list[Sample], verbose: bool = False) -> Score:
    """Parse every sample and compare with the oracle."""
    dsn = _parser()
    s = Score(messages=len(samples))
    for sample in samples:
        for variant in _variants(sample.data):
            s.variants += 1
            try:
                dsn.parse(variant, sample.name)
            except dsn.ReportError:
                pass
            except Exception as exc:  # a crash is what is counted
                s.crashed += 1
                s.notes.append(f"{sample.name} (variant): crash {type(exc).__name__}")
        events: list[Any] = []
        refusal = ""
        for message in split_mbox(sample.data):
            try:
                events.extend(dsn.parse(message, sample.name))
            except dsn.ReportError as exc:
                refusal = refusal or str(exc.reason)
            except Exception as exc:  # a crash
                s.crashed += 1
                s.notes.append(f"{sample.name}: crash {type(exc).__name__}: {exc}")
                refusal = "crash"
        if events and refusal != "crash":
            refusal = ""  # an mbox: one message read is the file read
        _score_sample(s, sample, events, refusal)
    s.stale_disputes = stale_disputes(s, {sample.name for sample in samples})
    if not verbose:
        s.notes = [n for n in s.notes if "crash" in n]
    return s


def _score_sample(s: Score, sample: Sample, events: list[Any], refusal: str) -> None:
    ours: dict[str, Any] = {}
    for event in events:
        ours.setdefault((event.recipient or "").lower(), event)
    if sample.mailman is not None:
        s.mailman_expected += len(sample.mailman)
        s.mailman_found += sum(1 for a in sample.mailman if a in ours)
    expected = {e.address: e for e in sample.expected if e.address}
    if not any(is_rfc_format(m) for m in split_mbox(sample.data)):
        if expected:
            s.non_rfc_with_address += 1
            hits = [ours[a] for a in expected if a in ours]
            for address in expected:
                if address in ours:
                    _score_non_rfc_verdict(s, sample, expected[address], ours[address])
            if hits:
                s.non_rfc_read += 1
                s.non_rfc_linkable += any(e.message_id or e.return_path for e in hits)
        return
    s.rfc_format += 1
    refusal_disputed = None
    if refusal:
        s.refused += refusal != "crash"
        s.notes.append(f"{sample.name}: refused: {refusal}")
        refusal_disputed = next((d for d in DISPUTED if d.file == sample.name
                                 and d.kind == "refused"), None)
        if refusal_disputed is not None and refusal != "crash":
            s.refused_disputed += 1
            _use(s, refusal_disputed)
    else:
        s.parsed += 1
    for address, exp in expected.items():
        if (address not in ours and "" in ours
                and exp.verdict in (VERDICT_COMPLAINT, VERDICT_AUTH_FAILURE)):
            # mailout names no complainant it cannot verify (the enclosed To: is not
            # read): ingestion acts on the linked message's recipient.
            s.complaints_to_linked += 1
            _score_verdict(s, sample, exp, ours[""])
            continue
        s.recipients += 1
        event = ours.get(address)
        if event is None:
            if refusal_disputed is not None and refusal_disputed.address == address:
                s.addresses_disputed += 1
                continue
            disputed = next((_dispute(sample.name, address, "address", a) for a in ours
                             if _dispute(sample.name, address, "address", a)), None)
            if disputed is not None:
                s.addresses_disputed += 1
                _use(s, disputed)
                _score_verdict(s, sample, exp, ours[disputed.ours])
            elif not refusal:
                s.notes.append(f"{sample.name}: missed {address}; ours: {sorted(ours)}")
            continue
        s.addresses_right += 1
        _score_verdict(s, sample, exp, event)
    for address in ours:
        if address and address not in expected and not _ADDR_SPEC.fullmatch(address):
            s.junk_addresses += 1
            s.notes.append(f"{sample.name}: junk address {address!r}")


def _score_non_rfc_verdict(s: Score, sample: Sample, exp: Any, event: Any) -> None:
    mine = verdict_of(event)
    if exp.verdict == VERDICT_NONE and mine == VERDICT_NONE:
        return
    s.non_rfc_verdicts_judged += 1
    s.non_rfc_verdicts_right += mine == exp.verdict
    disputed = _dispute(sample.name, exp.address, "verdict", mine) \
        if mine != exp.verdict else None
    if disputed is not None:
        s.non_rfc_verdicts_disputed += 1
        _use(s, disputed)
    if exp.verdict == VERDICT_SOFT:
        s.non_rfc_oracle_soft += 1
        s.non_rfc_soft_to_hard += mine == VERDICT_HARD
        s.non_rfc_soft_to_hard_disputed += mine == VERDICT_HARD and disputed is not None
    if mine != exp.verdict:
        s.notes.append(f"{sample.name} (non-RFC): {exp.address} verdict {mine}, oracle "
                       f"{exp.verdict} ({exp.reason}); ours: {event.diagnostic!r}"
                       + (" [disputed]" if disputed else ""))


def _score_verdict(s: Score, sample: Sample, exp: Any, event: Any) -> None:
    mine = verdict_of(event)
    disputed = None
    if exp.verdict != VERDICT_NONE or mine != VERDICT_NONE:
        s.verdicts_judged += 1
        s.verdicts_right += mine == exp.verdict
        if mine != exp.verdict:
            disputed = _dispute(sample.name, exp.address, "verdict", mine)
            s.notes.append(f"{sample.name}: {exp.address} verdict {mine}, oracle "
                           f"{exp.verdict} ({exp.reason}); ours: {event.diagnostic!r}"
                           + (" [disputed]" if disputed else ""))
        if disputed is not None:
            s.verdicts_disputed += 1
            _use(s, disputed)
    if exp.verdict == VERDICT_SOFT:
        s.oracle_soft += 1
        s.soft_to_hard += mine == VERDICT_HARD
        s.soft_to_hard_disputed += mine == VERDICT_HARD and disputed is not None
    if mine == VERDICT_HARD:
        s.hard_verdicts += 1
        s.hard_right += exp.verdict == VERDICT_HARD
    if exp.status:
        s.statuses_judged += 1
        got = status_of(event)
        s.statuses_right += got == exp.status
        if got != exp.status:
            s.notes.append(f"{sample.name}: {exp.address} status {got}, oracle {exp.status}")


def stale_disputes(s: Score, files: set[str]) -> list[str]:
    """Listed disputes about files of this corpus that no longer arose as listed."""
    used = set(s.disputes_used)
    return [key for d in DISPUTED
            if d.file in files and (key := f"{d.file} {d.address} {d.kind}") not in used]


def _with_disputes(s: Score) -> list[str]:
    if not s.disputes_used:
        return []
    non_rfc_verdicts = s.share(s.non_rfc_verdicts_right + s.non_rfc_verdicts_disputed,
                               s.non_rfc_verdicts_judged)
    non_rfc_soft_to_hard = s.share(s.non_rfc_soft_to_hard - s.non_rfc_soft_to_hard_disputed,
                                   s.non_rfc_oracle_soft)
    return [
        f"  with the {len(s.disputes_used)} disagreements where Sisimai is judged wrong "
        "(bench/bounce_disputes.py) counted for mailout:",
        f"    refused    {s.refused - s.refused_disputed} RFC-format messages",
        f"    addresses  {s.share(s.addresses_right + s.addresses_disputed, s.recipients)}",
        f"    verdicts   {s.share(s.verdicts_right + s.verdicts_disputed, s.verdicts_judged)}"
        " agree",
        f"    soft->hard {s.share(s.soft_to_hard - s.soft_to_hard_disputed, s.oracle_soft)}",
        f"    non-RFC verdicts {non_rfc_verdicts} agree; soft->hard {non_rfc_soft_to_hard}",
    ]


def report(name: str, s: Score) -> str:
    lines = [
        f"corpus {name}: {s.messages} messages, {s.rfc_format} in RFC 3464/5965 format, "
        f"{s.variants} CRLF/CR/truncated copies",
        f"  parsed     {s.share(s.parsed, s.rfc_format)} of the RFC-format messages",
        f"  refused    {s.refused} RFC-format messages",
        f"  crashed    {s.crashed} (all messages and copies)",
        f"  addresses  {s.share(s.addresses_right, s.recipients)} of Sisimai's recipients",
        f"  verdicts   {s.share(s.verdicts_right, s.verdicts_judged)} agree "
        "(hard/soft/complaint)",
        f"  statuses   {s.share(s.statuses_right, s.statuses_judged)} agree",
        f"  soft->hard {s.share(s.soft_to_hard, s.oracle_soft)} of Sisimai's soft bounces",
        f"  hard right {s.share(s.hard_right, s.hard_verdicts)} of mailout's hard verdicts",
        f"  junk addresses {s.junk_addresses}",
        f"  complaints naming no recipient (act on the linked message's): "
        f"{s.complaints_to_linked}",
        f"  non-RFC    {s.non_rfc_with_address} with a recipient: "
        f"{s.non_rfc_read} read with the right address, {s.non_rfc_linkable} of them "
        "with a Message-ID or return path",
        f"    of those, verdicts {s.share(s.non_rfc_verdicts_right, s.non_rfc_verdicts_judged)}"
        f" agree; soft->hard {s.share(s.non_rfc_soft_to_hard, s.non_rfc_oracle_soft)}",
    ]
    if s.mailman_expected:
        lines.append(f"  Mailman's expected addresses found: "
                     f"{s.share(s.mailman_found, s.mailman_expected)}")
    lines.extend(_with_disputes(s))
    lines.extend(f"  stale dispute (no longer arises as listed): {x}"
                 for x in s.stale_disputes)
    lines.extend(f"    {note}" for note in s.notes)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bounces", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="*", default=["flufl"])
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    for name in args.corpora:
        try:
            samples = load(name)
        except CorpusUnavailable as exc:
            print(f"corpus {name}: unavailable: {exc}", file=sys.stderr)
            return 2
        result = score(samples, verbose=args.verbose)
        out[name] = asdict(result)
        if not args.json:
            print(report(name, result))
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
