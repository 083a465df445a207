"""What a webhook test sends to one provider's endpoint about one event: each provider's
test file builds its :class:`Case` (a signed hard bounce, the same event signed afresh,
a forged copy, a stale copy) and runs the receivers' contract with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Built = tuple[bytes, dict[str, str]]


@dataclass
class Case:
    """How to talk to one provider's endpoint about one event."""

    provider: str
    bounce: Callable[[str, str, str], Built]  # (recipient, provider id, message id) -> request
    redeliver: Callable[[Built], Built]  # the same event, freshly signed
    forge: Callable[[Built], Built]  # a tampered or wrongly signed copy
    stale: Callable[[str, str, str], Built] | None  # signed long ago; None: nothing signed
    replay_refused: bool  # an exact copy is refused (signed nonce)
    unsigned: Callable[[Built], Built] = lambda b: (b[0], {})  # credentials taken away


def tamper(body: bytes) -> bytes:
    return body.replace(b"@", b"@x", 1)
