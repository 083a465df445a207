"""The bounce reader against a public corpus and an outside oracle (issue 32).

flufl.bounce's test messages (real bounces from Postfix, qmail, Exim, Exchange,
GroupWise, Yahoo, AOL and others; its sdist is fetched from PyPI with a pinned
sha256) read by mailout and by Sisimai (Debian's libsisimai-perl), whose verdicts
nobody here wrote. Skipped, with the reason, when PyPI or Sisimai is not there.
``python -m bench.bounces`` prints the same figures, also for other corpora.

Sisimai's set-of-emails is not on PyPI: with ``MAILOUT_SET_OF_EMAILS`` naming a checkout's
``maildir/bsd``, its figures are held to issue 32's targets too (bench.bounces, and
bench.bounce_links for the linking of plain-text bounces), and the lists of cases where
Sisimai is judged wrong or a bounce cannot link (bench/bounce_disputes.py) to what still
arises.
"""

from __future__ import annotations

import os

import pytest
from bench.bounce_corpus import CorpusUnavailable, Sample, load
from bench.bounce_disputes import DISPUTED, UNLINKED
from bench.bounce_links import Links, measure, to_return_path
from bench.bounces import Score, score, split_mbox


@pytest.fixture(scope="module")
def flufl() -> Score:
    try:
        samples = load("flufl")
    except CorpusUnavailable as exc:
        pytest.skip(f"bounce corpus unavailable: {exc}")
    return score(samples, verbose=True)


def test_no_message_crashes_the_reader(flufl: Score) -> None:
    assert flufl.messages == 117
    assert flufl.crashed == 0, flufl.notes  # also over CRLF, CR and truncated copies


def test_every_rfc_format_message_is_parsed(flufl: Score) -> None:
    assert flufl.parsed == flufl.rfc_format == 23, flufl.notes


def test_addresses_verdicts_and_statuses_agree_with_sisimai(flufl: Score) -> None:
    assert flufl.addresses_right / flufl.recipients >= 0.95, flufl.notes
    assert flufl.verdicts_right / flufl.verdicts_judged >= 0.95, flufl.notes
    assert flufl.statuses_right / flufl.statuses_judged >= 0.9, flufl.notes
    assert flufl.soft_to_hard == 0, flufl.notes  # no soft refusal would suppress anyone
    assert flufl.junk_addresses == 0


def test_plain_text_bounces_give_the_addresses_mailman_expects(flufl: Score) -> None:
    assert flufl.mailman_found / flufl.mailman_expected >= 0.98
    assert flufl.non_rfc_read / flufl.non_rfc_with_address >= 0.95


@pytest.fixture(scope="module")
def set_of_emails_samples() -> list[Sample]:
    directory = os.environ.get("MAILOUT_SET_OF_EMAILS")
    if not directory:
        pytest.skip("MAILOUT_SET_OF_EMAILS (a set-of-emails maildir/bsd checkout) is not set")
    try:
        return load(directory)
    except CorpusUnavailable as exc:
        pytest.skip(f"bounce corpus unavailable: {exc}")


@pytest.fixture(scope="module")
def set_of_emails(set_of_emails_samples: list[Sample]) -> Score:
    return score(set_of_emails_samples, verbose=True)


@pytest.fixture(scope="module")
def set_of_emails_links(set_of_emails_samples: list[Sample]) -> Links:
    return measure(set_of_emails_samples)


def test_set_of_emails_meets_the_targets(set_of_emails: Score) -> None:
    s = set_of_emails
    assert s.crashed == 0, s.notes
    assert s.parsed == s.rfc_format, s.notes  # every RFC-format message, none refused
    assert s.refused == 0, s.notes
    assert s.verdicts_right / s.verdicts_judged >= 0.95, s.notes  # against Sisimai itself
    assert (s.addresses_right + s.addresses_disputed) / s.recipients >= 0.99, s.notes
    assert (s.soft_to_hard - s.soft_to_hard_disputed) / s.oracle_soft <= 0.01, s.notes
    assert s.junk_addresses == 0


def test_set_of_emails_prose_bounces_are_read_and_never_harder_than_they_say(
        set_of_emails: Score) -> None:
    s = set_of_emails
    # 244 with a recipient, of which 21 are no bounce or name another address (auto-
    # replies, delivery notices, complaints in JSON, mailing-list errors, forwards).
    assert s.non_rfc_read / s.non_rfc_with_address >= 0.9, s.notes
    assert s.non_rfc_soft_to_hard == s.non_rfc_soft_to_hard_disputed, s.notes


def test_set_of_emails_prose_bounces_link_back(set_of_emails_links: Links) -> None:
    links = set_of_emails_links
    assert links.recoverable >= 220
    # Every miss is one listed as unlinkable with its reason (UNLINKED), and every
    # listed one still misses.
    assert len(links.misses) == links.unlinked_listed, links.misses
    assert links.stale == []
    assert links.verp_linked / links.verp_linkable >= 0.99
    assert links.mid_linked / links.mid_linkable >= 0.98


def test_every_dispute_with_sisimai_still_arises(set_of_emails: Score) -> None:
    assert set_of_emails.stale_disputes == []


def test_every_dispute_says_why() -> None:
    assert all(d.kind in ("verdict", "address", "refused") and len(d.why) > 20
               for d in DISPUTED)
    assert len({(d.file, d.address, d.kind) for d in DISPUTED}) == len(DISPUTED)
    assert all(u.kind in ("message-id", "verp") and len(u.why) > 20 for u in UNLINKED)
    assert len({(u.file, u.kind) for u in UNLINKED}) == len(UNLINKED)


def test_a_bounce_is_rewritten_as_delivered_to_our_return_path() -> None:
    raw = (b"To: someone@shop.example\nDelivered-To: someone@shop.example\n"
           b"Subject: x\n\nTo: kept@customer.example\n")
    assert to_return_path(raw, b"bounces+1-ab@shop.example") == (
        b"To: <bounces+1-ab@shop.example>\nDelivered-To: <bounces+1-ab@shop.example>\n"
        b"Subject: x\n\nTo: kept@customer.example\n")


def test_an_mbox_file_is_read_as_its_messages() -> None:
    one = b"From: a@b.example\nSubject: x\n\nbody\n"
    box = b"From MAILER-DAEMON  Thu Apr 29 23:34:45 2015\n" + one + \
        b"\nFrom MAILER-DAEMON  Thu Apr 29 23:35:45 2015\n" + one
    assert split_mbox(one) == [one]
    assert len(split_mbox(box)) == 2
