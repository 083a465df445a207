"""Where mailout and Sisimai disagree on Sisimai's set-of-emails ``maildir/bsd`` and
mailout is judged right: each case read by hand from the message, with the reason.

Sisimai is the oracle of :mod:`bench.bounces`, not the truth. A disagreement listed here
is one where the report itself (its RFC 3464 fields, the MTA's own words, the SMTP
transcript) says what mailout says. ``python -m bench.bounces`` prints its figures as
measured against Sisimai, and again with these cases counted for mailout; a case that
no longer disagrees the way it is listed is printed as stale, so that this list cannot
hide a change.

Every entry names the corpus file, the recipient as Sisimai reports it, what is disputed
(``verdict``: hard/soft; ``address``: the recipient; ``refused``: the report), what
mailout says, and why.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Disputed:
    """One disagreement with Sisimai where mailout reads the message right."""

    file: str
    address: str  # the recipient as Sisimai reports it (lower case)
    kind: str  # "verdict", "address" or "refused"
    ours: str  # mailout's verdict ("hard"/"soft"), or the address it reports ("" for none)
    why: str


_UNKNOWN_AND_DISABLED = (
    "'550 5.2.1 <x>... User Unknown': unknown and disabled both say the mailbox takes no "
    "mail and nothing blames the message (bounce_rules.AGREEING_CODES); Sisimai calls the "
    "same text userunknown in five other messages of the corpus")
_GMAIL = ("'The email account that you tried to reach does not exist.' is Gmail's text for "
          "5.1.1, an account that does not exist; no filter is named")

DISPUTED: tuple[Disputed, ...] = (
    # mailout hard, Sisimai soft: the report says the mailbox does not exist.
    Disputed("lhost-receivingses-01.eml", "userunknown@neko.example.jp", "verdict", "hard",
             "Status 5.1.1 and '550 5.1.1 Mailbox does not exist' agree; nothing names a "
             "filter (Sisimai's ReceivingSES module says filtered)"),
    Disputed("lhost-receivingses-02.eml", "userunknown@neko.example.jp", "verdict", "hard",
             "the same report as lhost-receivingses-01"),
    Disputed("lhost-sendmail-02.eml", "userunknown@example.org", "verdict", "hard",
             "its own block says Status 5.1.1, '550 5.1.1 ... User Unknown'; Sisimai gave it "
             "the other recipient's 5.2.1 and the DATA stage"),
    Disputed("lhost-sendmail-02.eml", "filtered@example.com", "verdict", "hard",
             "the reply came to RCPT: under '>>> DATA' a pipelined transcript lists the RCPT "
             "replies first and DATA's last ('503 Need RCPT'); and " + _UNKNOWN_AND_DISABLED),
    Disputed("lhost-sendmail-27.eml", "this-local-part-does-not-exist-on-the-system@mineo.jp",
             "verdict", "hard",
             "'550 5.0.0 <x>... User unknown' under '>>> DATA' is the pipelined RCPT reply: "
             "the next one, '503 5.0.0 Need RCPT', is DATA's; Sisimai takes it for a refusal "
             "after DATA, i.e. a filter"),
    Disputed("lhost-surfcontrol-01.eml", "kijitora@example.com", "verdict", "hard",
             "'550 kijitora@example.com... No such user'; nothing names a filter or the "
             "DATA stage"),
    Disputed("rfc3464-01.eml", "userunknown@bouncehammer.jp", "verdict", "hard",
             "the recipient's block says 5.1.1 '550 5.1.1 ... User Unknown'; Sisimai read the "
             "text part's 'Not enough disk space', which is about another recipient "
             "(<nekochan>)"),
    Disputed("rfc3464-42.eml", "jane.doe@some-domain.net", "verdict", "hard", _GMAIL),
    Disputed("rfc3464-66.eml", "mikeneko@example.com", "verdict", "hard", _GMAIL),
    Disputed("lhost-messagingserver-06.eml", "kijitora@example.jp", "verdict", "hard",
             _UNKNOWN_AND_DISABLED),
    Disputed("lhost-postfix-13.eml", "kijitora@example.jp", "verdict", "hard",
             "'550 5.2.1 <x>... User Unknown (in reply to RCPT TO command)'; Sisimai took "
             "'5.2.2 ... Mailbox Full' from the next recipient's lines. And "
             + _UNKNOWN_AND_DISABLED),
    Disputed("lhost-ezweb-02.eml", "this-local-part-does-not-exist-on-the-server@ezweb.ne.jp",
             "verdict", "hard",
             "the carrier's reply for the address is '550 user unknown (in reply to RCPT TO "
             "command)', naming it (not the filter's '550 : User unknown'); the preamble's "
             "'account is disabled' says as well that the mailbox takes no mail"),
    # mailout soft, Sisimai hard: nothing certain says the mailbox does not exist.
    Disputed("lhost-bigfoot-02.eml", "kijitora@example.org", "verdict", "soft",
             "Status 5.7.1 (delivery not authorised) contradicts '553 Invalid recipient': "
             "statements that disagree suppress only when they repeat (soft)"),
    Disputed("lhost-postfix-05.eml", "kijitora@example.org", "verdict", "soft",
             "'450 4.1.1 ... User unknown in virtual alias table': the receiver itself calls "
             "it temporary (Postfix's unknown_*_reject_code=450 or soft_bounce while tables "
             "are rebuilt); a 4xx is never hard"),
    Disputed("lhost-postfix-46.eml", "neko-nyaan@ne.auone-net.jp", "verdict", "soft",
             "'550 <x>: Recipient address rejected.' names no cause: Postfix writes it for "
             "any recipient restriction (access maps, policy services), not only for an "
             "unknown mailbox"),
    Disputed("lhost-postfix-80.eml", "xxxx@xxxx.com", "verdict", "soft",
             "'MailFrom domain is listed in Spamhaus': our sending domain is blacklisted; "
             "the address is fine"),
    Disputed("rhost-aol-06.eml", "neko@libsisimai.org", "verdict", "soft",
             "'Name service error ... Malformed or unexpected name server reply' is a DNS "
             "failure, not a statement that the domain accepts no mail"),
    Disputed("rhost-messagelabs-03.eml", "kijitora@example.com", "verdict", "soft",
             "'542 kijitora@example.com Rejected' with Status 5.0.0: nothing says the "
             "mailbox does not exist"),
    # Plain-text (non-RFC) bounces, mailout hard, Sisimai soft: the bounce's own words
    # say the mailbox does not exist, and nothing names a filter, DATA or a policy.
    Disputed("lhost-x1-01.eml", "kijitora@example.co.jp", "verdict", "hard",
             "'The following addresses had delivery errors' / 'kijitora@example.co.jp "
             "[User unknown]': nothing else is said (Sisimai's X1 module says filtered)"),
    Disputed("lhost-x1-02.eml", "kijitora@example.org", "verdict", "hard",
             "the same wording as lhost-x1-01: '[User unknown]' next to the address"),
    Disputed("lhost-x1-03.eml", "kijitora@example.org", "verdict", "hard",
             "the same wording as lhost-x1-01: '[User unknown]' next to the address"),
    Disputed("lhost-x2-01.eml", "kijitora@example.co.jp", "verdict", "hard",
             "'This user doesn't have a example.co.jp account': the account does not exist"),
    Disputed("lhost-x2-02.eml", "kijitora@example.com", "verdict", "hard",
             "'This user doesn't have a example.com account', as in lhost-x2-01"),
    Disputed("lhost-x2-02.eml", "sabineko@example.com", "verdict", "hard",
             "'This user doesn't have a example.com account', as in lhost-x2-01"),
    Disputed("lhost-mxlogic-03.eml", "kijitora@example.co.jp", "verdict", "hard",
             "'<kijitora@example.co.jp>: 550 unknown user <kijitora@example.co.jp>' names the "
             "address; no filter or stage is named"),
    Disputed("lhost-postfix-07.eml", "kijitora@user.example.or.jp", "verdict", "hard",
             "'host mx.user.example.or.jp said: 550 <kijitora@user.example.or.jp>: User "
             "unknown'; nothing names a filter or the DATA stage"),
    Disputed("lhost-mailfoundry-01.eml", "kijitora@example.org", "verdict", "hard",
             "'failed with: 550 <kijitora@example.org> No such user here'"),
    Disputed("lhost-zoho-03.eml", "shironeko@example.org", "verdict", "hard",
             "'Invalid Address, ERROR_CODE :550, ... mailbox unavailable': the address is "
             "named invalid with a permanent reply"),
    Disputed("lhost-exchange2003-04.eml", "kijitora@example.com", "verdict", "hard",
             "Exchange's 'Recipient Not Found' under 'Your message did not reach some or all "
             "of the intended recipients'"),
    # Addresses.
    Disputed("arf-12.eml", "undisclosed-recipient-in-headers@libsisimai.org.invalid",
             "address", "user@example.com",
             "Sisimai's placeholder; the report's Removal-Recipient field (the ARF draft's "
             "opt-out report) names user@example.com"),
    Disputed("lhost-domino-03.eml", "kijitora@neko.example.com", "address",
             "kijitora@neko.example.org",
             "the Final-Recipient field, which RFC 3464 makes the report's statement; Sisimai "
             "took the text part's address from before a domain rewrite"),
    Disputed("lhost-office365-04.eml", "otsu-sakaba-hunter-nyaaaaaaan@ezweb.ne.jp", "address",
             "otsu-sakaba-hunter-neko-nyaaaaaaan@ezweb.ne.jp",
             "the Final-Recipient field, also the text's first address; Sisimai took the "
             "address of a mailto: link"),
    Disputed("lhost-postfix-79.eml", "kijitora@mailhub0", "address", "nekko@c.example.co.jp",
             "the Final-Recipient is a local alias expansion with no domain; the "
             "Original-Recipient is the address that was sent to, the outbox row's"),
)


@dataclass(frozen=True)
class Unlinked:
    """A non-RFC bounce that cannot link back by one of the two ways, and why."""

    file: str
    kind: str  # "message-id" or "verp"
    why: str


_SES_JSON = ("an Amazon SES notification (JSON) forwarded as mail: it names the message by "
             "SES's own id (mail.messageId, no '@'), not by a Message-ID header; mailout "
             "links SES's id through the ses:// webhook (provider message id), not from mail")
_NO_ENVELOPE = ("the saved copy has no To:, Delivered-To, X-Original-To or Envelope-To "
                "header (an mbox excerpt without its envelope); it links by the original's "
                "Message-ID instead")

UNLINKED: tuple[Unlinked, ...] = (
    Unlinked("lhost-amazonses-09.eml", "message-id", _SES_JSON),
    Unlinked("lhost-amazonses-10.eml", "message-id", _SES_JSON),
    Unlinked("lhost-office365-02.eml", "verp", _NO_ENVELOPE),
    Unlinked("rhost-franceptt-03.eml", "verp", _NO_ENVELOPE),
    Unlinked("lhost-sendmail-14.eml", "message-id",
             "a person forwarded the bounce as quoted text ('> '): the first quoted "
             "Message-Id is the bounce's own, the original's comes later; quoted text is "
             "not read as headers (and to our signed return path the forward would not come)"),
)
