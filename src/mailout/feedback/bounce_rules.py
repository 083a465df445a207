"""Why a message bounced, and whether that is hard (suppress the address now) or soft:
the rules as tables, so that a reviewer can read them in one place.

A bounce carries up to three statements about one recipient: the DSN's ``Status`` (the
reporting MTA's summary), the enhanced status codes in the diagnostic text (the remote
server's own words, sometimes nested: ``5.1.0 - Unknown address error 550-'5.2.2 mailbox
full'``), and the diagnostic text. They often disagree. The most specific wins:

1. :data:`TEXT_RULES`, first match, on the diagnostic text: a named reason (a blacklist,
   a rate limit, DMARC, a full mailbox) is more specific than any code.
2. else :data:`CODE_RULES` on the innermost enhanced code of the diagnostic that is not
   ``x.0.0``; else on the ``Status``.
3. else :attr:`Reason.UNKNOWN`.

Then facts about where the refusal came from can only make it softer: a refusal of
``MAIL FROM`` (:data:`SENDER_COMMANDS`) is about our sender, whatever it says; an unknown
mailbox that the server claimed only after it had accepted the recipient (in reply to
``DATA``, :data:`FILTERED_AFTER`) is its content filter speaking, and so is a carrier's
"User unknown" that names no address (:data:`FILTERING_HOSTS`).

Hard (:data:`HARD_REASONS`) means the mailbox or its domain does not exist, has moved or
accepts no mail at all, and the failure is permanent (a 5.x.x code, or no code). Every
other reason is soft whatever its class digit: policy, reputation, rate, content, virus
and authentication refusals are about the message or the sending server, not the
address, and a full or disabled mailbox may come back. Soft bounces suppress only when
they repeat (``MAILOUT_SOFT_BOUNCE_LIMIT``). A sender-side reason
(:data:`SENDER_SIDE_REASONS`: our envelope sender or domain was refused) suppresses
nobody and is an operator alert: the fault is our configuration.

The verdicts follow the field's practice; the public corpus in ``bench.bounces`` measures
them against Sisimai's.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from mailout.models import BounceKind


class Reason(enum.StrEnum):
    """Why a recipient's mail came back: stored with each bounce event."""

    MAILBOX_UNKNOWN = "mailbox_unknown"  # no such mailbox at that domain (hard)
    DOMAIN_UNKNOWN = "domain_unknown"  # the domain does not exist or cannot be routed (hard)
    MAILBOX_MOVED = "mailbox_moved"  # the mailbox or domain moved, no forwarding (hard)
    NOT_ACCEPTING = "not_accepting"  # the domain accepts no mail at all: null MX (hard)
    MAILBOX_DISABLED = "mailbox_disabled"  # the account is disabled or suspended
    MAILBOX_FULL = "mailbox_full"  # over quota
    MESSAGE_TOO_BIG = "message_too_big"  # the message exceeds a size limit
    RATE_LIMITED = "rate_limited"  # too many messages, connections or recipients
    SPAM_BLOCK = "spam_block"  # the sending IP or domain is blacklisted or distrusted
    CONTENT = "content"  # the content was judged spam or unacceptable
    VIRUS = "virus"  # the message was judged to carry malware
    DMARC = "dmarc"  # SPF, DKIM or DMARC failed: our authentication setup
    POLICY = "policy"  # refused by a local policy that names no more specific cause
    SENDER_REJECTED = "sender_rejected"  # our envelope sender or its domain was refused
    RELAY_DENIED = "relay_denied"  # the server would not relay to that domain
    EXPIRED = "expired"  # delivery was retried until the sender gave up
    NETWORK = "network"  # no connection, timeouts, routing loops
    SYSTEM = "system"  # the receiving system failed or is misconfigured
    PROTOCOL = "protocol"  # an SMTP protocol or syntax error
    UNKNOWN = "unknown"  # nothing says why


HARD_REASONS = frozenset({Reason.MAILBOX_UNKNOWN, Reason.DOMAIN_UNKNOWN,
                          Reason.MAILBOX_MOVED, Reason.NOT_ACCEPTING})
SENDER_SIDE_REASONS = frozenset({Reason.SENDER_REJECTED})


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


# First match wins, on the diagnostic text in lower case. Refusals that blame the
# message, the sender or the sending server come before those that blame the mailbox:
# "550 5.1.1 <x@y>: blocked using zen.spamhaus.org" is a blacklist, not an unknown user.
TEXT_RULES: tuple[tuple[Reason, re.Pattern[str]], ...] = (
    (Reason.VIRUS, _rx(r"\bvirus", r"malware", r"\binfected\b", r"trojan")),
    (Reason.DMARC, _rx(r"\bdmarc\b", r"\bdkim\b", r"\bspf\b", r"sender policy framework",
                       r"authentication (?:information|checks?|results?)",
                       r"fails? to pass authentication",
                       r"unauthenticated (?:e-?mail|mail|message)")),
    (Reason.SENDER_REJECTED, _rx(
        r"sender address rejected", r"sender (?:address )?(?:is )?(?:rejected|refused|denied)",
        r"not allowed to send (?:from|as|mail from)", r"sender verify failed",
        r"sender domain (?:must (?:exist|resolve)|not found|does not exist|is invalid)",
        r"domain of sender address", r"sender address (?:does not|doesn't) exist",
        r"(?:invalid|bad|unknown|unverified) sender", r"mail from address (?:rejected|refused)",
        r"return path (?:rejected|refused|invalid)", r"sender (?:is )?not authori[sz]ed")),
    (Reason.RATE_LIMITED, _rx(
        r"rate[ -]limit", r"too many (?:messages|mails|e-?mails|connections|recipients|"
        r"concurrent|sessions|invalid)", r"frequency limit", r"throttl", r"mail flood",
        r"receiving mail at a rate", r"exceeded the (?:maximum )?(?:number|rate)",
        r"sending (?:limit|quota)", r"connection limit", r"try again later, closing")),
    (Reason.SPAM_BLOCK, _rx(
        r"black ?list", r"block ?list", r"\b(?:dns)?[rb]bl\b", r"spamhaus", r"spamcop",
        r"sorbs", r"barracuda", r"blocked using", r"(?<!not )listed (?:at|on|in|by)\b",
        r"reputation", r"reverse dns", r"\bptr\b", r"\brdns\b", r"ip address .*block",
        r"your ip", r"client host .*(?:blocked|rejected)", r"\bhelo\b",
        r"banned", r"blocked by", r"(?:connection|host|ip) (?:is )?(?:refused|blocked|denied)"
        r" (?:due|because|for)")),
    (Reason.CONTENT, _rx(
        r"\bspam\b", r"junk mail", r"content (?:filter|rejected|policy)",
        r"rejected (?:due to|because of) (?:its )?content", r"message content",
        r"suspicious", r"phish", r"not accepted for policy reasons.*content")),
    (Reason.NETWORK, _rx(r"name server reply", r"name service error.*(?:malformed|server "
                         r"failure|timed out|try again)", r"temporary failure in name resolution",
                         r"servfail")),
    (Reason.MAILBOX_FULL, _rx(
        r"mail ?box (?:is )?full", r"full mail ?box", r"quota", r"insufficient (?:disk |storage )?"
        r"(?:space|storage)", r"mail ?box (?:size )?limit", r"mail ?box has exceeded",
        r"not enough (?:disk )?space", r"user is over", r"storage (?:limit|allocation)",
        r"exceeded storage")),
    (Reason.MESSAGE_TOO_BIG, _rx(
        r"message (?:size|length) exceeds", r"message (?:is )?too (?:big|large)",
        r"exceeds (?:the )?(?:maximum|max|fixed maximum) (?:message )?size",
        r"size (?:limit|exceeds)", r"message size")),
    (Reason.MAILBOX_DISABLED, _rx(
        r"(?:account|mail ?box|user|address|recipient)\b[^.;]{0,40}\b(?:disabled|deactivated|"
        r"inactive|suspended|locked|frozen|closed|expired)",
        r"(?:disabled|deactivated|inactive|suspended) (?:e-?mail )?(?:account|mail ?box|user|"
        r"address)", r"not (?:currently )?active")),
    (Reason.RELAY_DENIED, _rx(r"relay(?:ing)? (?:access )?(?:denied|not permitted|prohibited|"
                              r"not allowed)", r"unable to relay", r"not permitted to relay",
                              r"we do not relay", r"relay access")),
    (Reason.MAILBOX_MOVED, _rx(r"has moved", r"moved (?:permanently|away)",
                               r"no forwarding address", r"owner has changed")),
    (Reason.NOT_ACCEPTING, _rx(r"null mx", r"does not accept (?:any )?(?:e-?)?mail",
                               r"accepts no mail")),
    (Reason.DOMAIN_UNKNOWN, _rx(
        r"host (?:or domain name )?(?:unknown|not found)", r"unknown (?:host|domain)",
        r"domain (?:name )?(?:not found|does not exist|doesn't exist|unknown|is not valid)",
        r"no such (?:host|domain)", r"name or service not known", r"nxdomain",
        r"unrouteable address", r"unroutable", r"no mx (?:record|host)",
        r"mx (?:record )?not found",
        r"bad destination (?:system|host)", r"domain (?:is )?not (?:hosted|served)",
        # Outlook.com: "... because the domain is not reachable. Please check the domain"
        r"domain is not reachable\. please check the domain")),
    (Reason.MAILBOX_UNKNOWN, _rx(
        r"user unknown", r"unknown user", r"no such (?:user|mailbox|recipient|account|address|"
        r"person)", r"(?:recipient|user|mailbox|address|account|addressee)(?: name)? "
        r"(?:does not|doesn't|did not) exist", r"(?:recipient|user|mailbox|address|account)"
        r" (?:is )?(?:unknown|not found|invalid|unavailable)", r"unknown (?:recipient|mailbox|"
        r"address|local[ -]part|account|e-?mail)", r"invalid (?:recipient|mailbox|address|user|"
        r"account)", r"not a valid (?:mailbox|user|recipient|address)",
        r"mailbox not (?:found|available)", r"user not (?:found|exist|listed)",
        r"bad destination mailbox", r"no mailbox", r"not our customer",
        r"(?:address|recipient) rejected: (?:access denied|not found|unknown)",
        r"undeliverable address", r"unknown or illegal alias", r"no longer (?:valid|exists)",
        r"does not exist", r"doesn't have a .* account", r"no account",
        # Gmail's text part: "wasn't delivered to x@y because the address couldn't be found"
        r"because the address couldn't be found",
        # Domino in Japanese: "User ... was not found in the Domino directory"
        r"ユーザー.{0,120}見つかりません")),
    (Reason.EXPIRED, _rx(r"expired", r"retry time(?:out)? (?:not reached|exceeded)",
                         r"could not be delivered (?:within|for)", r"gave up",
                         r"delivery time", r"too long in (?:the )?queue")),
    (Reason.NETWORK, _rx(r"timed? ?out", r"connection (?:refused|reset|lost|closed)",
                         r"network (?:is )?unreachable", r"no route to host", r"routing loop",
                         r"mail loop", r"loops back", r"could not connect")),
    (Reason.POLICY, _rx(r"polic(?:y|ies)", r"not authori[sz]ed", r"administrative prohibition",
                        r"prohibited", r"access denied", r"not permitted", r"refused")),
    (Reason.PROTOCOL, _rx(r"syntax error", r"command unrecognized", r"bad sequence",
                          r"protocol (?:error|violation)", r"line too long")),
)

# Receiving hosts whose "user unknown" is not always one: Japanese mobile carriers answer
# "550 : User unknown", naming no address, when the recipient's own sender filter refuses
# the mail, and "550 <x@y>: User unknown" when there is no such mailbox (au/KDDI; the
# same split is Sisimai's Rhost::KDDI).
FILTERING_HOSTS = re.compile(r"(?:^|\.)(?:ezweb\.ne\.jp|au\.com|docomo\.ne\.jp|"
                             r"softbank\.ne\.jp|i\.softbank\.jp)$|^mfsmax\.", re.IGNORECASE)
_NAMES_AN_ADDRESS = re.compile(r"[^\s<>()]@[A-Za-z0-9]")

# SMTP commands after which "no such user" is not believed: RFC 5321 has the server
# refuse an unknown mailbox at RCPT. One that accepted the recipient and then refuses
# the message after DATA "as an unknown user" has judged the message (per-user
# filters answer so, to hide that they exist); the mailbox may well exist. Soft, and
# the soft-bounce limit still suppresses an address that keeps failing.
FILTERED_AFTER = frozenset({"DATA"})
# SMTP commands whose refusal is about our envelope sender (or the server sending it),
# never the recipient: whatever the reply says ("550 Unroutable sender address",
# "553 ... does not exist"), it suppresses nobody and alerts the operator.
SENDER_COMMANDS = frozenset({"MAIL"})

# (reason of the text, subject.detail of a code): pairs that state the same thing in
# two ways, so the code is no contradicting statement, and the reason they add up to.
AGREEING_CODES: dict[tuple[Reason, str], Reason] = {
    # Sendmail-style "550 5.2.1 <x>... User Unknown": unknown and disabled both say the
    # mailbox takes no mail; the text is the more specific.
    (Reason.MAILBOX_UNKNOWN, "2.1"): Reason.MAILBOX_UNKNOWN,
    # Exchange Online's directory-based edge blocking: "550 5.4.1 Recipient address
    # rejected: Access denied" for an address that is not in the directory.
    (Reason.MAILBOX_UNKNOWN, "4.1"): Reason.MAILBOX_UNKNOWN,
    # iCloud: "550 5.1.1 <x>: inactive email address": the code says no such mailbox.
    (Reason.MAILBOX_DISABLED, "1.1"): Reason.MAILBOX_UNKNOWN,
    # Sendmail writes 5.7.27 (RFC 7505's "sender address has null MX") with "Host does
    # not accept mail" for the recipient's domain's null MX.
    (Reason.NOT_ACCEPTING, "7.27"): Reason.NOT_ACCEPTING,
}

# ``subject.detail`` of an enhanced status code (RFC 3463 and its IANA registry).
CODE_RULES: dict[str, Reason] = {
    "1.0": Reason.MAILBOX_UNKNOWN, "1.1": Reason.MAILBOX_UNKNOWN,
    "1.2": Reason.DOMAIN_UNKNOWN, "1.3": Reason.MAILBOX_UNKNOWN,
    "1.4": Reason.POLICY,  # ambiguous address: the server would not choose
    "1.6": Reason.MAILBOX_MOVED, "1.7": Reason.SENDER_REJECTED,
    "1.8": Reason.SENDER_REJECTED, "1.9": Reason.SYSTEM, "1.10": Reason.NOT_ACCEPTING,
    "2.0": Reason.POLICY, "2.1": Reason.MAILBOX_DISABLED, "2.2": Reason.MAILBOX_FULL,
    "2.3": Reason.MESSAGE_TOO_BIG, "2.4": Reason.SYSTEM,
    "3.0": Reason.SYSTEM, "3.1": Reason.SYSTEM, "3.2": Reason.SYSTEM, "3.3": Reason.SYSTEM,
    "3.4": Reason.MESSAGE_TOO_BIG, "3.5": Reason.SYSTEM,
    "4.0": Reason.NETWORK, "4.1": Reason.NETWORK, "4.2": Reason.NETWORK,
    "4.3": Reason.SYSTEM, "4.4": Reason.DOMAIN_UNKNOWN, "4.5": Reason.SYSTEM,
    "4.6": Reason.NETWORK, "4.7": Reason.EXPIRED,
    "5.0": Reason.PROTOCOL, "5.1": Reason.PROTOCOL, "5.2": Reason.PROTOCOL,
    "5.3": Reason.RATE_LIMITED, "5.4": Reason.PROTOCOL, "5.5": Reason.PROTOCOL,
    "6.0": Reason.CONTENT, "6.1": Reason.CONTENT, "6.2": Reason.CONTENT,
    "6.3": Reason.CONTENT, "6.5": Reason.CONTENT, "6.6": Reason.CONTENT,
    "7.0": Reason.POLICY, "7.1": Reason.POLICY, "7.2": Reason.POLICY,
    "7.8": Reason.SENDER_REJECTED, "7.9": Reason.SENDER_REJECTED,
    "7.13": Reason.MAILBOX_DISABLED, "7.17": Reason.MAILBOX_MOVED,
    "7.18": Reason.MAILBOX_MOVED, "7.20": Reason.DMARC, "7.21": Reason.DMARC,
    "7.22": Reason.DMARC, "7.23": Reason.DMARC, "7.24": Reason.DMARC,
    "7.25": Reason.SPAM_BLOCK, "7.26": Reason.DMARC, "7.27": Reason.SENDER_REJECTED,
    "7.28": Reason.RATE_LIMITED,
}
# A subject with no listed detail: its generic meaning.
SUBJECT_RULES: dict[str, Reason] = {
    "1": Reason.UNKNOWN, "2": Reason.POLICY, "3": Reason.SYSTEM, "4": Reason.NETWORK,
    "5": Reason.PROTOCOL, "6": Reason.CONTENT, "7": Reason.POLICY,
}

_CODE = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.]*\d)")
# "Other or undefined" codes that servers use as catch-alls (Microsoft's 5.5.0 for any
# refusal): they state nothing, so they neither win nor veto a hard verdict.
_GENERIC = frozenset({"0.0", "4.0", "5.0"})
_REPLY = re.compile(r"(?<![\d.])([245])\d\d(?=[\s-]|$)")
_DELIVERY_PROGRAM = re.compile(r"\s*x-unix\s*;", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a bounce means for one recipient."""

    kind: BounceKind
    reason: Reason
    status: str | None  # the enhanced code that was judged most specific

    @property
    def sender_side(self) -> bool:
        """The refusal is about our sender: an operator alert, no suppression."""
        return self.reason in SENDER_SIDE_REASONS


def codes(text: str | None) -> list[str]:
    """The enhanced status codes in ``text``, in order."""
    return [".".join(m.groups()) for m in _CODE.finditer(text or "")]


def status_code(status: str | None, diagnostic: str | None) -> str | None:
    """The most specific code: the innermost (last) one of the diagnostic that is not
    a catch-all (``x.0.0``, ``x.4.0``, ``x.5.0``), else the ``Status``, else any code of
    the diagnostic."""
    found = codes(diagnostic)
    specific = [c for c in found if not _generic(c)]
    own = codes(status)
    if specific:
        return specific[-1]
    if own:
        return own[0]
    return found[-1] if found else None


def reason_for_text(text: str | None) -> Reason | None:
    """The first :data:`TEXT_RULES` reason that ``text`` matches, if any."""
    lowered = (text or "").lower()
    if not lowered:
        return None
    for reason, pattern in TEXT_RULES:
        if pattern.search(lowered):
            return reason
    return None


def reason_for_code(code: str | None) -> Reason:
    """The :data:`CODE_RULES` (or :data:`SUBJECT_RULES`) reason of an enhanced code."""
    if not code:
        return Reason.UNKNOWN
    _, subject, detail = code.split(".")
    return CODE_RULES.get(f"{subject}.{detail}") or SUBJECT_RULES.get(subject, Reason.UNKNOWN)


def classify(status: str | None, diagnostic: str | None,
             remote_host: str | None = None, command: str | None = None) -> Verdict:
    """The verdict for one failed recipient: the ``Status`` field (or None), the
    diagnostic text (which may hold codes of its own), the host that refused it
    (a DSN's ``Remote-MTA``) and the SMTP command it refused (``RCPT``, ``DATA``), when
    known.

    The reason is the most specific statement's. Hard needs more: no statement may
    blame something else. A ``Status: 5.7.1`` (not authorised) with "Invalid
    recipient", or "Unknown address" wrapped around a ``5.2.2`` full mailbox, is soft:
    when the reports disagree, the address is not suppressed on a guess. Codes that
    say the same as the text in other words (:data:`AGREEING_CODES`) do not disagree.
    A sender-side statement anywhere makes the whole verdict sender-side.
    """
    code = status_code(status, diagnostic)
    reason = reason_for_text(_text_only(diagnostic)) or reason_for_code(code)
    if _DELIVERY_PROGRAM.match(diagnostic or ""):
        reason = Reason.SYSTEM  # a local delivery program failed (procmail...), not the address
    stated_codes = [c for c in codes(status) + codes(diagnostic) if not _generic(c)]
    agreeing = {c for c in stated_codes if (reason, _subject_detail(c)) in AGREEING_CODES}
    if agreeing:
        reason = AGREEING_CODES[(reason, _subject_detail(next(iter(agreeing))))]
    if reason is Reason.MAILBOX_UNKNOWN and _filtered(diagnostic, remote_host, command):
        reason = Reason.POLICY
    stated = {reason_for_code(c) for c in stated_codes if c not in agreeing}
    if stated & SENDER_SIDE_REASONS:
        reason = next(iter(stated & SENDER_SIDE_REASONS))
    if (command or "").upper() in SENDER_COMMANDS:
        reason = Reason.SENDER_REJECTED
    permanent = code.startswith("5") if code else _reply_class(diagnostic) != "4"
    agreed = not (stated - HARD_REASONS - {Reason.UNKNOWN})
    hard = reason in HARD_REASONS and permanent and agreed
    return Verdict(BounceKind.HARD if hard else BounceKind.SOFT, reason, code)


def _filtered(diagnostic: str | None, remote_host: str | None, command: str | None) -> bool:
    """An "unknown user" that is a filter's answer (:data:`FILTERED_AFTER`,
    :data:`FILTERING_HOSTS`)."""
    if (command or "").upper() in FILTERED_AFTER:
        return True
    return (FILTERING_HOSTS.search(remote_host or "") is not None
            and not _NAMES_AN_ADDRESS.search(diagnostic or ""))


def _subject_detail(code: str) -> str:
    return code.split(".", 1)[1]


def _reply_class(diagnostic: str | None) -> str | None:
    """The class digit of the basic SMTP reply code (``550``) in the diagnostic."""
    match = _REPLY.search(diagnostic or "")
    return match.group(1) if match else None


def _generic(code: str) -> bool:
    return code.split(".", 1)[1] in _GENERIC


def _text_only(diagnostic: str | None) -> str:
    """The diagnostic without its codes and the ``smtp;`` type, for the text rules."""
    text = re.sub(r"^\s*[a-z-]+;\s*", "", diagnostic or "", flags=re.IGNORECASE)
    return _CODE.sub(" ", text)
