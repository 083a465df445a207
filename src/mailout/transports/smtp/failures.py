"""What an exception during an SMTP send means, as a :class:`SendOutcome`.

The client runs every send under one ``try``; whatever aiosmtplib, the socket or
the TLS layer raises ends up here, with the stage the send had reached, and comes
out as the outcome :mod:`mailout.transports.smtp.classify` decides on.
"""

from __future__ import annotations

import socket
import ssl
from typing import Final

from aiosmtplib.errors import SMTPResponseException, SMTPServerDisconnected

from mailout.transports.smtp.outcome import Failure, SendOutcome, Stage, parse_reply

_MIN_CODE: Final = 100  # aiosmtplib reports an unparsable reply as code -1
_TLS_STAGES: Final = (Stage.CONNECT, Stage.STARTTLS)


def outcome_for_error(exc: BaseException, stage: Stage, timeout: float) -> SendOutcome:
    """The outcome of a send that raised ``exc`` at ``stage`` (``timeout``: the
    deadline it ran under, for the detail). A negative reply raised as an exception is
    a REPLY failure with that reply; anything else a failure of its kind, described
    by the exception's type and message (never a reply's text: AUTH is redacted by
    the caller)."""
    if isinstance(exc, SMTPResponseException) and exc.code >= _MIN_CODE:
        return SendOutcome(stage, reply=parse_reply(exc.code, exc.message), failure=Failure.REPLY)
    failure = failure_kind(exc, stage)
    if failure is Failure.TIMEOUT:
        return SendOutcome(stage, failure=failure, detail=f"timed out after {timeout:g}s")
    return SendOutcome(stage, failure=failure, detail=f"{type(exc).__name__}: {exc}"[:200])


def failure_kind(exc: BaseException, stage: Stage) -> Failure:
    """Which :class:`Failure` ``exc`` (or an exception it was raised from) is: a TLS
    error while connecting or starting TLS, a name that did not resolve, a timeout, a
    refused connection, else a dropped one."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__

    def has(*kinds: type[BaseException]) -> bool:
        return any(isinstance(e, kinds) for e in chain)

    if stage in _TLS_STAGES and has(ssl.SSLError):
        return Failure.TLS
    if has(socket.gaierror):
        return Failure.DNS
    if has(TimeoutError):
        return Failure.TIMEOUT
    if stage is Stage.CONNECT and has(OSError) and not has(SMTPServerDisconnected):
        return Failure.REFUSED
    return Failure.DISCONNECT
