"""``mailout check`` for SMTP: what a connection check's outcome means, in plain words.

The verdict is one sentence in plain words saying what is wrong and which setting
to look at. It never prints a password: the password is redacted from anything a
server or a library says back.
"""

from __future__ import annotations

from mailout.transports.base import CheckResult
from mailout.transports.smtp import codes as smtpcodes
from mailout.transports.smtp.outcome import Failure, SendOutcome, Stage
from mailout.transports.smtp.settings import SmtpSettings, TlsMode

_REDACTED = "********"


def unusable_ca_file(settings: SmtpSettings, exc: Exception) -> CheckResult:
    """The verdict when the TLS context cannot be built from ``SMTP_CA_FILE``."""
    line = f"SMTP: cannot load SMTP_CA_FILE {settings.ca_file!r}: {exc}"
    return CheckResult(False, _redact(line, settings))


def verdict(outcome: SendOutcome, settings: SmtpSettings) -> CheckResult:
    """What a connection check that ended in ``outcome`` means, in one line."""
    if outcome.accepted:
        return CheckResult(True, _redact(_describe_ok(outcome, settings), settings))
    line = f"SMTP {settings.host}:{settings.port}: {explain(outcome, settings)}"
    return CheckResult(False, _redact(line, settings))


def diagnosis(outcome: SendOutcome, settings: SmtpSettings) -> str:
    """The one-line verdict for a failed ``outcome``, as ``mailout check`` prints it:
    for the worker's log when a send pauses on a configuration error."""
    return verdict(outcome, settings).line


def _describe_ok(outcome: SendOutcome, s: SmtpSettings) -> str:
    tls = {TlsMode.NONE: "no TLS", TlsMode.STARTTLS: "STARTTLS",
           TlsMode.IMPLICIT: "implicit TLS"}[s.tls]
    auth = f"authenticated as {s.username!r}" if s.username else "no AUTH (SMTP_USER unset)"
    if s.username and s.tls is TlsMode.NONE:
        auth += " WITHOUT TLS: the password crossed the network readably"
    # A multi-line reply (EHLO's extensions) on one line: its first line says enough.
    first = outcome.reply.text.splitlines()[0] if outcome.reply and outcome.reply.text else ""
    said = f"; last reply {outcome.reply.code} {first}".rstrip() if outcome.reply else ""
    return f"SMTP {s.host}:{s.port}: connected, {tls}, {auth}{said}"


def explain(outcome: SendOutcome, s: SmtpSettings) -> str:
    """What a failed check means, in plain words, with the settings to look at."""
    where = f"{s.host}:{s.port}"
    failure, stage, reply = outcome.failure, outcome.stage, outcome.reply
    if failure is Failure.REFUSED:
        return (f"connection refused: nothing accepts connections at {where}. "
                "Check SMTP_HOST and SMTP_PORT, and that the server is running.")
    if failure is Failure.DNS:
        return f"the host name {s.host!r} does not resolve. Check SMTP_HOST."
    if failure is Failure.TIMEOUT:
        return (f"no answer within {s.timeout:g}s (SMTP_TIMEOUT) at {stage.value}: a firewall, "
                "a wrong port, or a TLS mismatch (port 465 needs SMTP_TLS=implicit).")
    if failure is Failure.TLS:
        return (f"TLS failed at {stage.value}: {outcome.detail}. If the certificate is not "
                "trusted, point SMTP_CA_FILE at its CA bundle; check SMTP_TLS "
                "(starttls, implicit or none) matches the port.")
    if failure is Failure.CLEARTEXT_AUTH:
        return (f"AUTH refused: SMTP_TLS=none would send the password for {s.username!r} "
                f"readably to {s.host}, which is not loopback. Set SMTP_TLS to starttls or "
                "implicit, or SMTP_ALLOW_PLAINTEXT_AUTH=true for a relay on a trusted network.")
    if failure is Failure.AUTH_NOT_OFFERED:
        return (f"SMTP_USER is set but the server at {where} offers no AUTH"
                f"{' before TLS' if s.tls is TlsMode.NONE else ''}: unset SMTP_USER and "
                "SMTP_PASS, or check SMTP_TLS (many servers offer AUTH only after STARTTLS).")
    if failure is Failure.DISCONNECT:
        return (f"the server closed the connection at {stage.value} ({outcome.detail}). "
                "A TLS mismatch does this: check SMTP_TLS against the port.")
    if reply is not None:
        return _explain_reply(stage, f"{reply.code} {reply.text}".strip(), reply.code, s)
    return f"failed at {stage.value}: {outcome.detail or 'no reply'}"


def _explain_reply(stage: Stage, said: str, code: int, s: SmtpSettings) -> str:
    if code == smtpcodes.AUTH_CREDENTIALS_INVALID or stage is Stage.AUTH:
        return (f"authentication failed for user {s.username!r}: the server said \"{said}\". "
                "Check SMTP_USER and SMTP_PASS.")
    if code in (smtpcodes.AUTH_REQUIRED, smtpcodes.ENCRYPTION_REQUIRED):
        return (f"the server requires authentication or encryption: \"{said}\". "
                "Set SMTP_USER/SMTP_PASS, and SMTP_TLS to starttls or implicit.")
    if stage is Stage.CONNECT:
        return f"the server refused the session in its greeting: \"{said}\"."
    if stage is Stage.STARTTLS:
        return f"the server refused STARTTLS: \"{said}\". Check SMTP_TLS."
    return f"the server rejected {stage.value.upper()}: \"{said}\"."


def _redact(text: str, s: SmtpSettings) -> str:
    # A server or library that echoes the password back must not get it printed.
    if s.password:
        return text.replace(s.password, _REDACTED)
    return text


def implicit_tls_port(s: SmtpSettings) -> CheckResult:
    """The verdict when the server sent no greeting but answered a TLS handshake."""
    return CheckResult(False, f"{s.host}:{s.port} speaks TLS from the first byte (implicit "
                              "TLS) but SMTP_TLS is not implicit: set SMTP_TLS=implicit "
                              "(or use smtps://) for this port.")
