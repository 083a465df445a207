"""Sending again a message whose earlier attempt's outcome is unknown.

An attempt cut off after its content left (a lost reply, a worker killed before its
commit) may or may not have delivered the message. A provider that keeps each
idempotency key for a while (its *key window*) drops a copy sent again with the same
key inside that window, so the resend is safe there, and only there: inside it the
message goes through that transport (that failover member) alone, under every
policy, and waits for it while it is down. Outside it, or through a transport that
keeps no key, ``MAILOUT_ON_UNKNOWN`` decides between a possible duplicate
(``resend``) and parking the row for review (``hold``). Every decision is written to
the attempt log's detail, parking included.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mailout.models import ClaimedMessage, OnUnknown, Outcome
from mailout.transports.base import Transport
from mailout.transports.multi import MultiTransport

WINDOW_MARGIN = 0.1  # resend inside a key window only with this share of it to spare
WINDOW_MARGIN_CAP = 3600.0  # and never more than an hour of it


@dataclass(frozen=True, slots=True)
class Resend:
    """How a message with an unsettled unknown attempt goes out again."""

    transport: Transport  # the lane's, or a route to the failover member that had it
    note: str  # for the attempt log: which case applied
    # Inside that transport's key window: only it may send the message (its label).
    only: str | None = None


@dataclass(frozen=True, slots=True)
class Park:
    """Not sent again: parked in ``unknown`` for review (MAILOUT_ON_UNKNOWN=hold)."""

    note: str  # for the attempt log: why


def key_window(transport: Transport, via: str | None) -> tuple[str, float | None]:
    """The transport an unknown attempt went ``via`` and how long it drops a repeated
    key (None: it drops none, or which transport it was is not known)."""
    if isinstance(transport, MultiTransport):
        if via in transport.labels:
            return via, transport.window_of(via)
        return via or "an unrecorded transport", None
    if via is None or via == transport.name:  # None: a row from before transports had names
        # getattr: a transport written before dedupe_window joined the contract has none.
        return transport.name, getattr(transport, "dedupe_window", None)
    return via, None  # another transport (MAILOUT_TRANSPORT changed, or "*": several)


def window_left(window: float | None, since: datetime, now: datetime) -> float | None:
    """Seconds a key first used at ``since`` is still honoured, less a safety margin."""
    if window is None:
        return None
    margin = min(window * WINDOW_MARGIN, WINDOW_MARGIN_CAP)
    return window - margin - (now - since).total_seconds()


def after_unknown(msg: ClaimedMessage, transport: Transport,
                  on_unknown: OnUnknown) -> Resend | Park:
    """How to resend a message an earlier attempt may have delivered, or why to park it.

    Inside the idempotency window of the transport that had it, the resend goes
    through that transport alone (that failover member only, whatever the policy)
    with the same key, and the provider drops the copy if it has the first; while
    that member is down the message waits for it. Outside the window, or when the
    transport drops no repeated key, ``MAILOUT_ON_UNKNOWN`` decides: ``resend`` (any
    member; the recipient may get a duplicate) or ``hold`` (parked).
    """
    assert msg.unknown_since is not None
    label, window = key_window(transport, msg.unknown_via)
    left = window_left(window, msg.unknown_since, msg.claimed_at)
    multi = transport if isinstance(transport, MultiTransport) else None
    if multi is not None and label not in multi.labels:
        multi = None  # which member had it is not known: no member to prefer
    if left is not None and left > 0:
        route = multi.route(label, only=True) if multi is not None else transport
        return Resend(route, f"after unknown: inside {label}'s {window:.0f}s key window "
                             f"({left:.0f}s left)", only=label)
    why = (f"past {label}'s {window:.0f}s key window" if window is not None
           else f"{label} drops no repeated key")
    if on_unknown is OnUnknown.HOLD:
        return Park(f"after unknown: {why}; MAILOUT_ON_UNKNOWN=hold: parked for review, "
                    "not sent")
    route = multi.route(label, only=False) if multi is not None else transport
    return Resend(route, f"after unknown: {why}; MAILOUT_ON_UNKNOWN=resend, may duplicate")


def described(resend: Resend, outcome: Outcome, detail: str | None) -> str:
    """The attempt log's detail for a resend that ended in ``outcome``: what happened,
    not what was hoped for (``detail``: the transport's own, appended)."""
    if resend.only is None:
        note = resend.note
    elif outcome is Outcome.WAITING:
        note = f"{resend.note}: waits for {resend.only}, sent through no other"
    else:
        note = f"{resend.note}: resent through {resend.only} alone, same key"
        if outcome is Outcome.SENT:
            note += f" ({resend.only} drops it if it has the first copy)"
    return f"{note}; {detail}" if detail else note
