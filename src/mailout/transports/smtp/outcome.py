"""What happened in one SMTP exchange, in SMTP's own terms.

The client reports a :class:`SendOutcome`: the :class:`Stage` it got to, the
server's :class:`Reply` and, when it did not end in a positive reply, the kind of
:class:`Failure`. :mod:`mailout.transports.smtp.classify` turns it into the
provider-neutral :class:`~mailout.transports.base.SendResult`. Nothing outside this
package sees these types.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Stage(enum.StrEnum):
    """Where in the SMTP dialogue an outcome happened."""

    CONNECT = "connect"  # TCP connect, implicit TLS handshake, or the 220 greeting
    EHLO = "ehlo"
    STARTTLS = "starttls"
    AUTH = "auth"
    MAIL = "mail"  # MAIL FROM
    RCPT = "rcpt"  # RCPT TO
    DATA = "data"  # the DATA command, before the server's 354
    BODY = "body"  # the content and the final ".", up to the server's reply


class Failure(enum.StrEnum):
    """Why a send did not get a positive reply."""

    REPLY = "reply"  # the server answered with a negative reply code
    REFUSED = "refused"  # connection refused or reset while connecting
    DNS = "dns"  # the host name did not resolve
    TIMEOUT = "timeout"  # no answer within the timeout
    DISCONNECT = "disconnect"  # the connection dropped
    TLS = "tls"  # certificate verification or TLS handshake failed
    # Our own settings stopped the exchange before AUTH (a configuration error):
    CLEARTEXT_AUTH = "cleartext_auth"  # AUTH without TLS to a host that is not loopback
    AUTH_NOT_OFFERED = "auth_not_offered"  # SMTP_USER is set but the server offers no AUTH


@dataclass(frozen=True, slots=True)
class Reply:
    """One SMTP reply: the code, the enhanced status code if any, and its text."""

    code: int
    text: str
    enhanced: str | None = None


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """The result of one attempt to hand a message to the server.

    ``failure`` is None when the server accepted the message; ``reply`` then
    holds its final 2yz reply. ``rcpt_replies`` holds each envelope recipient's
    reply to RCPT TO, in order, for the recipients that got one: the server may
    accept some and refuse others, and the message then goes to those it accepted.
    """

    stage: Stage
    reply: Reply | None = None
    failure: Failure | None = None
    detail: str = ""  # a short description of a non-reply failure, never a secret
    rcpt_replies: tuple[tuple[str, Reply], ...] = ()

    @property
    def accepted(self) -> bool:
        return self.failure is None


_ENHANCED = re.compile(r"([245])\.\d{1,3}\.\d{1,3}(?![\d.])")  # RFC 3463, e.g. 5.1.1


def parse_reply(code: int, text: str) -> Reply:
    """A :class:`Reply`, with the RFC 3463 code if the text starts with one of its class."""
    match = _ENHANCED.match(text)
    same_class = match is not None and int(match.group(1)) == code // 100
    return Reply(code, text, match.group(0) if match and same_class else None)
