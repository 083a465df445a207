"""An in-memory transport for tests: keeps what it is given, answers what it is told.

``MemoryTransport`` records every envelope it accepts in :attr:`~MemoryTransport.outbox`
and answers :class:`~mailout.transports.base.Decision.SENT` with a fresh provider id,
unless told otherwise: :meth:`~MemoryTransport.answer_for` answers every send to one
address alike, :meth:`~MemoryTransport.script` queues results to return, one per
send, and :meth:`~MemoryTransport.answer_always` sets a standing answer. So a test
can make one mailbox bounce, the fourth send a 4yz-like retry, or every send a
configuration error, without a server.

Chosen with ``MAILOUT_TRANSPORT=memory://``. The outbox lives in the process that
sends: use it with an in-process worker (``mailout.testing``), not ``mailout worker``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque

from mailout.message.envelope import Envelope
from mailout.transports.base import CheckResult, Decision, SendResult

_ids = itertools.count(1)


class MemoryTransport:
    """Keeps sent envelopes in memory; answers from a script, else "sent"."""

    name = "memory"

    def __init__(self, *, delay: float = 0.0, dedupe_window: float | None = None,
                 name: str = "memory") -> None:
        self.name = name
        self.dedupe_window = dedupe_window  # a test can play a deduplicating provider
        self.outbox: list[Envelope] = []
        self.attempts: list[tuple[Envelope, SendResult]] = []
        self._script: deque[SendResult] = deque()
        self._always: SendResult | None = None
        self._per_address: dict[str, SendResult] = {}
        self._delay = delay
        self._closed = False

    def script(self, *results: SendResult | Decision) -> None:
        """Queue results for the next sends, in order. A bare Decision gets a plain reason."""
        self._script.extend(_as_result(item) for item in results)

    def answer_for(self, address: str, result: SendResult | Decision) -> None:
        """Answer every send to ``address`` (any recipient) with ``result``, before the
        script: a test can make one mailbox bounce and the rest go through."""
        self._per_address[address.lower()] = _as_result(result)

    def answer_always(self, result: SendResult | Decision | None) -> None:
        """Answer every send after the script with ``result``; None goes back to "sent"."""
        self._always = None if result is None else _as_result(result)

    def reset(self) -> None:
        """Forget the script, the standing answer and everything sent."""
        self._script.clear()
        self._always = None
        self._per_address.clear()
        self.outbox.clear()
        self.attempts.clear()

    async def send(self, envelope: Envelope) -> SendResult:
        if self._delay:
            await asyncio.sleep(self._delay)
        result = self._answer(envelope)
        if result.decision in (Decision.SENT, Decision.UNKNOWN):
            # An unknown outcome is one the provider may have accepted: keep it, so a
            # test can count the duplicates a resend produces.
            envelope.wire  # noqa: B018 (built now, as a real transport would, so errors show)
            self.outbox.append(envelope)
        self.attempts.append((envelope, result))
        return result

    def _answer(self, envelope: Envelope) -> SendResult:
        for address in envelope.recipients:
            found = self._per_address.get(address.lower())
            if found is not None:
                return found
        if self._script:
            return self._script.popleft()
        return self._always or self._sent()

    async def check(self) -> CheckResult:
        return CheckResult(True, "memory transport: nothing to check")

    async def close(self) -> None:
        self._closed = True

    @staticmethod
    def _sent() -> SendResult:
        return SendResult(Decision.SENT, reason="accepted", provider_id=f"memory-{next(_ids)}")

    def sent_to(self, address: str) -> list[Envelope]:
        """The envelopes kept for ``address`` (any of to, cc or bcc)."""
        return [e for e in self.outbox if address in e.recipients]



def _as_result(item: SendResult | Decision) -> SendResult:
    return item if isinstance(item, SendResult) else SendResult(item, f"scripted_{item.value}")
