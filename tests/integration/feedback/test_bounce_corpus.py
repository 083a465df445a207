"""The bounce reader against a public corpus and an outside oracle (issue 32).

flufl.bounce's test messages (real bounces from Postfix, qmail, Exim, Exchange,
GroupWise, Yahoo, AOL and others; its sdist is fetched from PyPI with a pinned
sha256) read by mailout and by Sisimai (Debian's libsisimai-perl), whose verdicts
nobody here wrote. Skipped, with the reason, when PyPI or Sisimai is not there.
``python -m bench.bounces`` prints the same figures, also for other corpora.
"""

from __future__ import annotations

import pytest
from bench.bounce_corpus import CorpusUnavailable, load
from bench.bounces import Score, score


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
