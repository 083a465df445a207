"""What the attempt log says about the transport: an outage or a pause going on now.

A worker's breakers live in its process; ``mailout status`` runs in another one. So
the state it shows is derived from what every worker already writes: an attempt
that met an outage (outcome ``outage``) or a configuration error (``paused``) is
logged, uncharged, for every probe. When the newest such attempt is newer than the
newest attempt the transport answered (``sent`` or ``failed``: the server took or
refused the message itself), the transport is in trouble now, since the first such
attempt after that answer.

No extra writes on the hot path, and it is right with any number of workers. Two
limits, shown to the operator: with every worker stopped, the state stays as the
last probe left it (hence ``last_at``); and it lags the workers by at most one
probe interval (``MAILOUT_OUTAGE_PROBE_CAP_SECONDS``).

Every query reads the (outcome, finished_at) index: a maximum or a short range.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from mailout.db.schema import attempts
from mailout.models import Outcome
from mailout.support.timeutil import aware

_TROUBLE = (Outcome.OUTAGE, Outcome.PAUSED)
_ANSWERED = (Outcome.SENT, Outcome.FAILED)


@dataclass(frozen=True, slots=True)
class TransportTrouble:
    """An outage or a configuration pause that the attempt log shows going on now."""

    kind: str  # "outage" or "paused" (the attempt outcome)
    since: datetime  # the first such attempt after the transport last answered
    last_at: datetime  # the newest such attempt: the last probe
    attempts: int  # uncharged attempts since ``since``
    stage: str | None  # where the newest one ended
    said: str | None  # its reply code and text, or the worker's detail


def _newest(conn: Connection, outcome: Outcome) -> datetime | None:
    newest: datetime | None = conn.execute(
        select(func.max(attempts.c.finished_at)).where(attempts.c.outcome == outcome.value)
    ).scalar_one()
    return aware(newest)


def transport_trouble(conn: Connection) -> TransportTrouble | None:
    """The outage or pause going on now, per the attempt log; None when there is none."""
    newest = {o: _newest(conn, o) for o in _TROUBLE}
    present = [(at, o) for o, at in newest.items() if at is not None]
    if not present:
        return None
    last_at, kind = max(present)
    answered = [at for at in (_newest(conn, o) for o in _ANSWERED) if at is not None]
    last_answer = max(answered) if answered else None
    if last_answer is not None and last_answer >= last_at:
        return None
    window = [attempts.c.outcome == kind.value]
    if last_answer is not None:
        window.append(attempts.c.finished_at > last_answer)
    since, count = conn.execute(
        select(func.min(attempts.c.finished_at), func.count()).where(*window)).one()
    row = conn.execute(
        select(attempts.c.stage, attempts.c.reply_code, attempts.c.reply_text,
               attempts.c.detail)
        .where(attempts.c.outcome == kind.value)
        .order_by(attempts.c.finished_at.desc()).limit(1)).one()
    reply = " ".join(str(x) for x in (row.reply_code, row.reply_text) if x is not None)
    said = "; ".join(x for x in (reply, row.detail) if x) or None
    return TransportTrouble(kind=kind.value, since=aware(since) or last_at, last_at=last_at,
                            attempts=int(count), stage=row.stage, said=said)
