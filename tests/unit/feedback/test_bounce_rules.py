"""The bounce classification table: each row is a (Status, diagnostic) pair as real MTAs
send them, mostly the cases issue 32 measured going wrong, and the verdict expected."""

from __future__ import annotations

import pytest

from mailout.feedback.bounce_rules import (
    CODE_RULES,
    HARD_REASONS,
    TEXT_RULES,
    Reason,
    classify,
    status_code,
)
from mailout.models import BounceKind

HARD, SOFT = BounceKind.HARD, BounceKind.SOFT

CASES = [
    # (Status, Diagnostic-Code, kind, reason)
    # Hard: the mailbox or the domain does not exist.
    ("5.1.1", "smtp; 550 5.1.1 <a@b.example>... User Unknown", HARD, Reason.MAILBOX_UNKNOWN),
    ("5.0.0", "smtp; 550 sorry, no mailbox here by that name", HARD, Reason.MAILBOX_UNKNOWN),
    ("5.1.2", "smtp; 550 Host unknown", HARD, Reason.DOMAIN_UNKNOWN),
    ("5.0.0", "X-Postfix; Host or domain name not found. Name service error for "
              "name=nx.example type=A: Host not found", HARD, Reason.DOMAIN_UNKNOWN),
    ("5.1.10", None, HARD, Reason.NOT_ACCEPTING),
    ("5.1.6", "smtp; 550 5.1.6 mailbox has moved", HARD, Reason.MAILBOX_MOVED),
    (None, "The email account that you tried to reach does not exist.", HARD,
     Reason.MAILBOX_UNKNOWN),
    # Soft whatever the class digit: policy, rate, reputation, content, virus, DMARC.
    ("5.0.0", "smtp; 550 Too many recipients", SOFT, Reason.RATE_LIMITED),
    # Lotus Notes: "not listed in" the directory is no blacklist listing.
    (None, "User not listed in the directory of this server", HARD, Reason.MAILBOX_UNKNOWN),
    ("5.0.0", "smtp; 550 Ip frequency limited", SOFT, Reason.RATE_LIMITED),
    ("5.0.0", "smtp; 550 5.7.26 DMARC check failed", SOFT, Reason.DMARC),
    ("5.0.0", "smtp; 554 Virus Detected", SOFT, Reason.VIRUS),
    ("5.0.0", "smtp; 554 Service currently unavailable", SOFT, Reason.UNKNOWN),
    ("5.2.1", "smtp; 550 5.2.1 The email account is over its sending rate limit", SOFT,
     Reason.RATE_LIMITED),
    ("5.7.1", "smtp; 554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using "
              "zen.spamhaus.org", SOFT, Reason.SPAM_BLOCK),
    ("5.7.1", "smtp; 550 5.7.1 Message rejected as spam by Content Filtering", SOFT,
     Reason.CONTENT),
    ("5.2.2", "smtp; 552 5.2.2 Mailbox full", SOFT, Reason.MAILBOX_FULL),
    ("5.2.1", "smtp; 550 5.2.1 This mailbox has been disabled", SOFT,
     Reason.MAILBOX_DISABLED),
    ("4.4.7", "X-Postfix; delivery temporarily suspended: connection timed out", SOFT,
     Reason.NETWORK),
    # The Status disagrees with the diagnostic's own code: the diagnostic's wins, and a
    # statement that blames something else vetoes a hard verdict.
    ("5.1.1", "smtp; 550 5.7.1 IP address blacklisted", SOFT, Reason.SPAM_BLOCK),
    ("5.7.1", "SMTP; 553 Invalid recipient a@b.example (Mode: normal)", SOFT,
     Reason.MAILBOX_UNKNOWN),
    # Codes that say the same as the text in other words (AGREEING_CODES), as the
    # set-of-emails corpus shows them: Sendmail-style 5.2.1 "User Unknown", Exchange
    # Online's directory-based edge blocking, iCloud's inactive address, Sendmail's
    # 5.7.27 for the recipient domain's null MX.
    ("5.2.1", "smtp; 550 5.2.1 <a@b.example>... User Unknown", HARD, Reason.MAILBOX_UNKNOWN),
    ("5.4.1", "smtp; 550 5.4.1 <a@b.example>: Recipient address rejected: Access denied "
              "[BL2NAM02FT061.eop-nam02.prod.protection.outlook.com]", HARD,
     Reason.MAILBOX_UNKNOWN),
    ("5.1.1", "smtp; 550 5.1.1 <a@icloud.example>: inactive email address", HARD,
     Reason.MAILBOX_UNKNOWN),
    ("5.7.27", "SMTP; 550 Host does not accept mail", HARD, Reason.NOT_ACCEPTING),
    # Well-known provider phrases.
    ("5.5.0", "smtp;554 The mail could not be delivered to the recipient because the domain "
              "is not reachable. Please check the domain and try again", HARD,
     Reason.DOMAIN_UNKNOWN),
    ("5.0.0", "Your message wasn't delivered to a@b.example because the address couldn't be "
              "found. Check for typos", HARD, Reason.MAILBOX_UNKNOWN),
    # A wrapper code around the remote server's: the innermost code counts.
    ("5.0.0", "smtp; 5.1.0 - Unknown address error 550-'5.2.2 mailbox full'", SOFT,
     Reason.MAILBOX_FULL),
    # Sender-side: our configuration, never the recipient's address.
    ("5.1.8", "smtp; 553 5.1.8 <bounce@shop.example>... Domain of sender address "
              "bounce@shop.example does not exist", SOFT, Reason.SENDER_REJECTED),
    ("5.7.1", "smtp; 550 5.7.1 Sender address rejected: Access denied", SOFT,
     Reason.SENDER_REJECTED),
    ("5.0.0", "smtp; 550 you are not allowed to send from shop.example", SOFT,
     Reason.SENDER_REJECTED),
    ("5.1.7", None, SOFT, Reason.SENDER_REJECTED),
    # A local delivery program failed: the mailer, not the address.
    ("5.1.1", 'x-unix; procmail: Couldn\'t create "/var/spool/mail/a"', SOFT, Reason.SYSTEM),
    # A temporary failure that the sender gave up on is never hard.
    ("4.1.1", "smtp; 450 4.1.1 <a@b.example>: Recipient address rejected: User unknown",
     SOFT, Reason.MAILBOX_UNKNOWN),
    # Nothing to go on: soft.
    (None, None, SOFT, Reason.UNKNOWN),
    ("5.0.0", None, SOFT, Reason.UNKNOWN),
]


@pytest.mark.parametrize(("status", "diagnostic", "kind", "reason"), CASES)
def test_verdict(status: str | None, diagnostic: str | None, kind: BounceKind,
                 reason: Reason) -> None:
    verdict = classify(status, diagnostic)
    assert (verdict.kind, verdict.reason) == (kind, reason)


@pytest.mark.parametrize("host", ["lsean.ezweb.ne.jp", "mfsmax.docomo.ne.jp", "msmx.au.com"])
def test_a_carriers_user_unknown_is_its_sender_filter(host: str) -> None:
    verdict = classify("5.0.0", "smtp; 550 : User unknown", host)
    assert (verdict.kind, verdict.reason) == (SOFT, Reason.POLICY)
    assert classify("5.0.0", "smtp; 550 : User unknown", "mx.example.com").kind is HARD


def test_a_carriers_user_unknown_naming_the_address_is_one() -> None:
    # au/KDDI: "550 <x@y>: User unknown" for a mailbox that does not exist (set-of-emails:
    # lhost-postfix-36, rfc3464-58, rhost-gsuite-09, lhost-messagingserver-09).
    verdict = classify("5.0.0", "smtp; 550 <a@ezweb.ne.jp>: User unknown", "lsean.ezweb.ne.jp")
    assert (verdict.kind, verdict.reason) == (HARD, Reason.MAILBOX_UNKNOWN)


@pytest.mark.parametrize(("command", "kind"), [("DATA", SOFT), ("RCPT", HARD), (None, HARD)])
def test_an_unknown_user_after_data_is_a_filter(command: str | None, kind: BounceKind) -> None:
    verdict = classify("5.0.0", "smtp; 550 Unknown user a@b.example", "mx.b.example", command)
    assert verdict.kind is kind


def test_sender_side_reasons_are_flagged_and_never_hard() -> None:
    verdict = classify("5.1.8", "smtp; 553 5.1.8 sender domain must exist")
    assert verdict.sender_side
    assert verdict.kind is SOFT
    assert not classify("5.1.1", "smtp; 550 5.1.1 user unknown").sender_side


@pytest.mark.parametrize(("status", "diagnostic", "code"), [
    ("5.1.1", "smtp; 550 5.7.1 blocked", "5.7.1"),
    ("5.0.0", "smtp; 5.1.0 - Unknown address error 550-'5.2.2 mailbox full'", "5.2.2"),
    ("5.1.1", "smtp; 550 user unknown", "5.1.1"),
    ("5.0.0", "smtp; 550 5.0.0 rejected", "5.0.0"),
    (None, "smtp; 550 5.5.0 Requested action not taken", "5.5.0"),
    (None, "version 10.5.1.2 said nothing", None),
])
def test_the_most_specific_code_is_chosen(status: str | None, diagnostic: str,
                                          code: str | None) -> None:
    assert status_code(status, diagnostic) == code


def test_the_tables_only_call_mailbox_and_domain_failures_hard() -> None:
    assert {Reason.MAILBOX_UNKNOWN, Reason.DOMAIN_UNKNOWN, Reason.MAILBOX_MOVED,
            Reason.NOT_ACCEPTING} == HARD_REASONS
    assert all(isinstance(r, Reason) for r in CODE_RULES.values())
    assert all(isinstance(r, Reason) for r, _ in TEXT_RULES)
