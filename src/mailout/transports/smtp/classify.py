"""Decide what an SMTP exchange means: sent, retry, fail, pause, outage or unknown.

Pure functions, no I/O. The client reports *what happened*
(:class:`~mailout.transports.smtp.outcome.SendOutcome`); :func:`classify` turns that
into *what to do* (:class:`Verdict`), following RFC 5321: a 4yz reply is transient,
a 5yz reply is permanent. Who is at fault depends on the stage: before the server
has accepted MAIL FROM nothing about this message was discussed, so a failure there
is the transport's (an outage: uncharged, the worker's breaker opens) or our
configuration's (a pause); from RCPT on it is this message's (charged).
:func:`to_result` wraps both into the provider-neutral :class:`~mailout.transports.base.SendResult`.

Also here: :func:`parse_enhanced_code` and :func:`parse_provider_id`, the
canonical parsers of reply text. They never raise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mailout.transports.base import Decision, RecipientResult, SendResult
from mailout.transports.smtp import codes as smtpcodes
from mailout.transports.smtp.check import diagnosis
from mailout.transports.smtp.outcome import Failure, Reply, SendOutcome, Stage
from mailout.transports.smtp.settings import SmtpSettings, TlsMode


@dataclass(frozen=True, slots=True)
class Verdict:
    """A :class:`~mailout.transports.base.Decision` with a short machine-friendly
    reason (a metrics label)."""

    action: Decision
    reason: str


# Stages before the message itself is discussed: a permanent reply here is about
# the connection, the account or the TLS setup, never about this one message.
_CONNECTION_STAGES = frozenset({Stage.CONNECT, Stage.EHLO, Stage.STARTTLS, Stage.AUTH})
# Stages where the server has not yet accepted anything about this message: a lost
# connection or a 4yz reply to MAIL FROM here is the provider's trouble, not the
# message's, and is not charged to it.
_BEFORE_MAIL_ACCEPTED = _CONNECTION_STAGES | {Stage.MAIL}
# The port where TLS starts at once (RFC 8314): a plain-text client waits there for
# a greeting that never comes.
IMPLICIT_TLS_PORT = 465
_REJECTED_REASON = {
    Stage.CONNECT: "greeting_rejected",
    Stage.EHLO: "ehlo_rejected",
    Stage.STARTTLS: "starttls_rejected",
    Stage.AUTH: "auth_rejected",
}
# Replies that mean "fix the credentials or the TLS settings", whatever the stage.
_CONFIG_REPLIES = {
    smtpcodes.AUTH_CREDENTIALS_INVALID: "bad_credentials",
    smtpcodes.AUTH_REQUIRED: "auth_required",
    smtpcodes.ENCRYPTION_REQUIRED: "encryption_required",
}
_NO_CONTACT_REASON = {
    Failure.REFUSED: "connect_refused",
    Failure.DNS: "dns_failure",
    Failure.TIMEOUT: "timeout",
    Failure.DISCONNECT: "disconnect",
}

_SENT = Verdict(Decision.SENT, "accepted")
_LOST_REPLY = Verdict(Decision.UNKNOWN, "lost_reply_after_data")


def classify(outcome: SendOutcome) -> Verdict:
    """Decide what to do after one send attempt. Never raises.

    - accepted (no failure, and a 2yz reply or none) -> SENT "accepted";
    - at BODY (the content and the final "." were being sent) any failure that
      is not a reply -> UNKNOWN "lost_reply_after_data": the server may have
      queued the message, so a retry could deliver it twice;
    - TLS certificate or handshake failure -> PAUSE "tls_failure";
    - AUTH that the settings forbid (clear text to a remote host) or that the
      server does not offer -> PAUSE "cleartext_auth" or "auth_not_offered";
    - refused, DNS, timeout or disconnect before MAIL FROM was accepted
      (CONNECT/EHLO/STARTTLS/AUTH/MAIL) -> OUTAGE;
    - timeout or disconnect at RCPT or DATA -> RETRY (charged);
    - 4yz at CONNECT/EHLO/STARTTLS/AUTH or to MAIL FROM -> OUTAGE;
    - 4yz at RCPT/DATA/BODY -> RETRY;
    - 535, 530, 538 at any stage -> PAUSE;
    - other 5yz at CONNECT/EHLO/STARTTLS/AUTH -> PAUSE "<stage>_rejected";
    - any other reply at CONNECT/EHLO/STARTTLS/AUTH (a 250 to AUTH, a malformed
      code) -> PAUSE "unexpected_reply": the server is not what the settings say;
    - 5yz at MAIL/RCPT/DATA/BODY -> FAIL;
    - every recipient refused at RCPT: the weightiest refusal decides (a
      configuration error, else a 4yz, else a 5yz);
    - anything else -> RETRY "unexpected_outcome" (UNKNOWN at BODY).

    The basic reply code decides transient vs permanent; the enhanced code only
    refines the reason label (RFC 3463 says both carry the same class).
    """
    if outcome.failure is None:
        # Trust the transport's "accepted" unless the reply it attached contradicts it.
        if outcome.reply is None or _reply_class(outcome.reply.code) == smtpcodes.POSITIVE:
            return _SENT
        return _classify_reply(outcome.stage, outcome.reply)
    if outcome.failure is Failure.REPLY:
        reply = _deciding_reply(outcome)
        if reply is None:
            return _unforeseen(outcome.stage)
        return _classify_reply(outcome.stage, reply)
    if outcome.stage is Stage.BODY:
        # Whatever broke the connection after DATA's 354, the final "." may have
        # reached the server and been queued; only the reply went missing.
        return _LOST_REPLY
    if outcome.failure is Failure.TLS:
        return Verdict(Decision.PAUSE, "tls_failure")
    if outcome.failure in (Failure.CLEARTEXT_AUTH, Failure.AUTH_NOT_OFFERED):
        return Verdict(Decision.PAUSE, outcome.failure.value)
    reason = _NO_CONTACT_REASON.get(outcome.failure)
    if reason is None:
        return _unforeseen(outcome.stage)
    if outcome.stage in _BEFORE_MAIL_ACCEPTED:
        return Verdict(Decision.OUTAGE, reason)
    return Verdict(Decision.RETRY, reason)


def greeting_timed_out(outcome: SendOutcome, settings: SmtpSettings) -> bool:
    """True when a plain-text client connected but no greeting came: the symptom of an
    implicit-TLS port (the server waits for a TLS handshake, the client for a 220)."""
    return (outcome.failure is Failure.TIMEOUT and outcome.stage is Stage.CONNECT
            and settings.tls is not TlsMode.IMPLICIT)


def tls_mode_mismatch(outcome: SendOutcome, settings: SmtpSettings,
                      speaks_tls: bool = False) -> bool:
    """True for the greeting timeout of a plain-text client on an implicit-TLS port:
    port 465, or any port that answered a TLS handshake (``speaks_tls``; SES
    documents 2465). Nothing is wrong with the provider, the setting is."""
    return greeting_timed_out(outcome, settings) and (
        settings.port == IMPLICIT_TLS_PORT or speaks_tls)


def to_result(outcome: SendOutcome, settings: SmtpSettings | None = None,
              speaks_tls: bool = False) -> SendResult:
    """The provider-neutral result of one SMTP exchange: its verdict, the provider's
    id parsed from an accepting reply, the stage and reply for the attempt log, and,
    for a message to several recipients, how each recipient's RCPT went.

    With ``settings``: a greeting timeout on port 465 without implicit TLS is a
    PAUSE "tls_mode_mismatch", not an outage, and every PAUSE carries ``mailout
    check``'s diagnosis (which setting to look at) as its detail, for the log.
    """
    verdict = classify(outcome)
    detail = outcome.detail or None
    if settings is not None:
        if tls_mode_mismatch(outcome, settings, speaks_tls):
            verdict = Verdict(Decision.PAUSE, "tls_mode_mismatch")
        if verdict.action is Decision.PAUSE:
            detail = diagnosis(outcome, settings)
    reply = _deciding_reply(outcome)
    provider_id = None
    if verdict.action is Decision.SENT and reply is not None:
        provider_id = parse_provider_id(reply.text)
    return SendResult(
        decision=verdict.action,
        reason=verdict.reason,
        provider_id=provider_id,
        stage=outcome.stage.value,
        code=reply.code if reply else None,
        enhanced=reply.enhanced if reply else None,
        text=reply.text if reply else None,
        detail=detail,
        recipients=recipient_results(outcome, verdict.action),
    )


def recipient_results(outcome: SendOutcome, decision: Decision) -> tuple[RecipientResult, ...]:
    """Each recipient's fate, for a message sent to several (none for one: the
    message's decision says it all).

    A recipient the server accepted at RCPT shares the message's decision, but only
    when that is SENT: otherwise it is left out, and shares it anyway. A refused one
    gets its own reply's decision, RETRY (4yz) or FAILED (5yz); a refusal that is
    about our configuration (530 at RCPT...) is left to the message's PAUSE.
    """
    if len(outcome.rcpt_replies) < 2:  # one recipient: the message says it all
        return ()
    results = []
    for address, reply in outcome.rcpt_replies:
        if reply.code in _ACCEPTED_RCPT:
            if decision is Decision.SENT:
                results.append(_recipient(address, Decision.SENT, reply))
            continue
        own = _classify_reply(Stage.RCPT, reply).action
        if own in (Decision.RETRY, Decision.FAILED):
            results.append(_recipient(address, own, reply))
    return tuple(results)


def _recipient(address: str, decision: Decision, reply: Reply) -> RecipientResult:
    enhanced = reply.enhanced or parse_enhanced_code(reply.text)
    return RecipientResult(address, decision, reply.code, enhanced, reply.text)


_ACCEPTED_RCPT = frozenset({smtpcodes.OK, smtpcodes.USER_NOT_LOCAL_WILL_FORWARD})
# When every recipient was refused, the one whose refusal weighs most speaks for the
# message: a configuration error first, then a transient one (someone may yet get
# it), then a permanent one.
_WEIGHT = {Decision.PAUSE: 0, Decision.RETRY: 1, Decision.FAILED: 2}


def _refused_everyone(outcome: SendOutcome) -> Reply | None:
    """The reply that decides a transaction in which every RCPT was refused."""
    if outcome.stage is not Stage.RCPT or outcome.failure is not Failure.REPLY:
        return None
    refused = [r for _, r in outcome.rcpt_replies if r.code not in _ACCEPTED_RCPT]
    if len(refused) < 2:  # one refusal is the reply itself
        return None
    return min(refused,
               key=lambda r: _WEIGHT.get(_classify_reply(Stage.RCPT, r).action, len(_WEIGHT)))


def _deciding_reply(outcome: SendOutcome) -> Reply | None:
    return _refused_everyone(outcome) or outcome.reply


def _classify_reply(stage: Stage, reply: Reply) -> Verdict:
    reply_class = _reply_class(reply.code)
    enhanced = reply.enhanced or parse_enhanced_code(reply.text)
    if reply_class == smtpcodes.TRANSIENT:
        # Before MAIL FROM was accepted, a 4yz says the server will take nothing now.
        action = Decision.OUTAGE if stage in _BEFORE_MAIL_ACCEPTED else Decision.RETRY
        if reply.code == smtpcodes.SERVICE_NOT_AVAILABLE:
            return Verdict(action, "service_not_available")
        if enhanced == smtpcodes.MAILBOX_FULL:
            return Verdict(action, "mailbox_full")
        return Verdict(action, "transient_reply")
    if reply_class != smtpcodes.PERMANENT:
        if stage in _CONNECTION_STAGES:
            # A 250 to AUTH, a 3yz greeting: not the server the settings describe.
            return Verdict(Decision.PAUSE, "unexpected_reply")
        return _unforeseen(stage)
    config_reason = _CONFIG_REPLIES.get(reply.code)
    if config_reason is not None:
        return Verdict(Decision.PAUSE, config_reason)
    if stage in _CONNECTION_STAGES:
        return Verdict(Decision.PAUSE, _REJECTED_REASON[stage])
    if enhanced == smtpcodes.MESSAGE_TOO_BIG:
        return Verdict(Decision.FAILED, "message_too_big")
    if stage is Stage.RCPT:
        return Verdict(Decision.FAILED, "recipient_rejected")
    if stage is Stage.MAIL:
        return Verdict(Decision.FAILED, "sender_rejected")
    return Verdict(Decision.FAILED, "permanent_reply")


def _unforeseen(stage: Stage) -> Verdict:
    # An outcome the rules do not cover is most likely a transport quirk. Before
    # the final "." nothing was handed over, so a retry is safe and the attempt
    # limit still bounds it; after it, a retry could duplicate, so say UNKNOWN.
    if stage is Stage.BODY:
        return Verdict(Decision.UNKNOWN, "unexpected_outcome")
    return Verdict(Decision.RETRY, "unexpected_outcome")


def _reply_class(code: int) -> int | None:
    """The first digit of a well-formed reply code (2..5), else None."""
    first = code // 100
    return first if smtpcodes.POSITIVE <= first <= smtpcodes.PERMANENT else None


# RFC 3463: class "." subject "." detail, optionally after the basic code
# ("550 5.1.1" or "550-5.1.1" when given a whole reply line).
_ENHANCED_RE = re.compile(r"\s*(?:[2-5]\d\d[ -]\s*)?([245]\.\d{1,3}\.\d{1,3})(?![\d.])")


def parse_enhanced_code(text: str) -> str | None:
    """The RFC 3463 enhanced status code at the start of reply text, e.g. "5.1.1".

    Accepts the text alone ("5.1.1 no such user") or a whole reply line
    ("550 5.1.1 no such user"). Returns None when there is none. Never raises.
    """
    match = _ENHANCED_RE.match(text)
    return match.group(1) if match else None


# Longer "ids" are not ids: the column that stores them is bounded.
_MAX_ID_LENGTH = 255
# Only the first part of a reply is looked at, so a huge reply cannot cost much.
_MAX_SCAN = 2000
_ID_RE = r"([A-Za-z0-9][A-Za-z0-9._@+=/-]*)"
_PROVIDER_PATTERNS = (
    # Postfix, SendGrid, Mailjet...: "2.0.0 Ok: queued as 4Xyz12AbC"
    re.compile(r"\bqueued\s+as:?\s+<?" + _ID_RE, re.IGNORECASE),
    # Gmail: "2.0.0 OK  1700000000 a1-20020a05abc.123 - gsmtp" (timestamp, then id)
    re.compile(r"\bOK\s+\d+\s+" + _ID_RE + r"\s+-\s+gsmtp", re.IGNORECASE),
    # Exim: "OK id=1rABCD-000123-Ab"
    re.compile(r"\bid=<?" + _ID_RE, re.IGNORECASE),
    # Sendmail: "2.0.0 4ABCdef012345 Message accepted for delivery"
    re.compile(_ID_RE + r"\s+Message accepted for delivery", re.IGNORECASE),
)
# Exchange / Office 365 and others: "2.6.0 <id@host> [InternalId=...] Queued mail..."
_BRACKETED = re.compile(r"<([^<>\s]+)>")
# Amazon SES: "Ok 0100018c1f2e3d4c-...-000000"; the word after "Ok" must look like an
# id (has a digit, long enough) so that "Ok thanks" is not mistaken for one.
_AFTER_OK = re.compile(r"^\s*(?:2\.\d{1,3}\.\d{1,3}\s+)?OK:?\s+" + _ID_RE, re.IGNORECASE)
_MIN_BARE_ID = 8


def parse_provider_id(reply_text: str) -> str | None:
    """The provider's id for an accepted message, from the final 250 reply text.

    Recognises "queued as ID" (Postfix, SendGrid), "OK <ts> ID - gsmtp" (Gmail),
    "id=ID" (Exim), "ID Message accepted for delivery" (Sendmail), "<ID>" (Exchange
    and others; returned WITHOUT the angle brackets) and "Ok ID" (Amazon SES).
    Returns None when nothing id-like is found or the candidate is longer than
    255 characters. Never raises.
    """
    text = reply_text[:_MAX_SCAN] if isinstance(reply_text, str) else ""
    for pattern in _PROVIDER_PATTERNS:
        match = pattern.search(text)
        if match:
            return _clean(match.group(1))
    match = _BRACKETED.search(text)
    if match:
        return _clean(match.group(1))
    match = _AFTER_OK.match(text)
    if match:
        candidate = _clean(match.group(1))
        if candidate and len(candidate) >= _MIN_BARE_ID and any(c.isdigit() for c in candidate):
            return candidate
    return None


def _clean(candidate: str) -> str | None:
    # A sentence may end right after the id: "queued as ABC123."
    candidate = candidate.rstrip(".,;:")
    if not candidate or len(candidate) > _MAX_ID_LENGTH:
        return None
    return candidate
