"""The SMTP transport's pool slots, and sends taken along on another's connection.

At most ``size`` sends hold a slot (one connection each) at a time; the others wait
in the order they came. When a send holding a slot is about to write its content,
:mod:`mailout.transports.smtp.client` may take the first waiting send along: that
send's MAIL, RCPT and DATA leave in the same write as the content and its ".", which
RFC 2920 (3.1) allows on a connection that offers PIPELINING (the content may be the
first command of a group, MAIL and RCPT may appear anywhere in it). Once the final
reply and the taken-along send's replies are read, the slot and the connection pass
to it: one write and one round trip a message instead of two.

Only a send that would wait anyway (every slot taken) is taken along: a free slot is
never held back for company, so a slow server's reply to one send never delays
another that could have had a connection of its own. A connection then carries two
sends, which doubles what a capped pool (``SMTP_POOL_SIZE`` below the concurrency, as
providers that limit connections need) sends per round trip.

This module keeps the slots and the queue; what happens on a connection is the
client's and the transaction's to say.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

import aiosmtplib
from aiosmtplib import SMTPResponse

from mailout.message.envelope import Envelope


@dataclass(frozen=True, slots=True)
class Handover:
    """A connection passed to a taken-along send, its MAIL, RCPT and DATA already
    answered: ``replies`` in order, as a pipelined group reads them."""

    smtp: aiosmtplib.SMTP
    replies: tuple[SMTPResponse, ...]


@dataclass(eq=False, slots=True)
class Waiter:
    """A send waiting for a slot. ``handed`` resolves to None (a slot: take an idle
    connection or open one) or a :class:`Handover` (a slot and a connection on which
    this send's commands were written and answered)."""

    envelope: Envelope
    handed: asyncio.Future[Handover | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class Slots:
    """``size`` slots, a queue of waiting sends, and the hand-over between them."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: deque[Waiter] = deque()

    def take_free(self) -> bool:
        """Take a free slot if there is one (the common case, with no waiting)."""
        if self._free > 0:
            self._free -= 1
            return True
        return False

    async def acquire(self, envelope: Envelope) -> Handover | None:
        """A slot for ``envelope``'s send, waiting in turn when none is free.

        None: the caller holds a slot and finds its own connection. A Handover: it
        holds a slot and that connection, with its commands answered. Cancelled while
        waiting, it gives back whatever it was handed.
        """
        if self.take_free():
            return None
        waiter = Waiter(envelope)
        self._waiting.append(waiter)
        try:
            return await waiter.handed
        except BaseException:
            if waiter.handed.cancelled():
                with contextlib.suppress(ValueError):  # no longer queued if taken along
                    self._waiting.remove(waiter)
            else:  # handed a slot just before being cancelled: pass it on
                handover = waiter.handed.result()
                if handover is not None:
                    handover.smtp.close()  # out of step for anyone else
                self.release()
            raise

    def release(self) -> None:
        """Give a slot up: to the first send still waiting, else back to the pool."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.handed.done():
                waiter.handed.set_result(None)
                return
        self._free += 1

    def first_waiting(self) -> Waiter | None:
        """The send that has waited longest (left queued), or None."""
        while self._waiting:
            waiter = self._waiting[0]
            if not waiter.handed.done():
                return waiter
            self._waiting.popleft()  # cancelled while waiting
        return None

    def take_along(self, waiter: Waiter) -> None:
        """Take ``waiter`` (the first waiting send) out of the queue: its commands are
        going out on the caller's connection, and :meth:`hand_over` follows."""
        self._waiting.remove(waiter)

    def hand_over(self, waiter: Waiter, handover: Handover | None) -> bool:
        """Pass the caller's slot to ``waiter``, taken along, with ``handover`` (None:
        the connection went; it starts afresh). False if it was cancelled meanwhile:
        the caller keeps the slot (and must release it)."""
        if waiter.handed.done():
            return False
        waiter.handed.set_result(handover)
        return True
