"""Django's own email-backend tests pass through the outbox (issue 31, item 2).

``BaseEmailBackendTests`` (``tests/mail/tests.py`` of Django's sdist, fetched from PyPI
and checked against a pinned SHA-256) is the mixin every Django email backend
passes. It runs here, in a process of its own, for the oldest and the newest Django
mailout supports (both taken from their sdists, so the installed Django does not
matter), on SQLite and PostgreSQL, with Django's default mail settings: every message
is enqueued, sent by mailout's real worker over TCP to the SMTP sink of Django's own
SMTP backend tests, and checked by Django's assertions (see
:mod:`tests.support.django_mail_suite`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.support.pg import create_database, drop_database

from tests.support.django_sdist import PINNED, Unavailable, sdist

ROOT = Path(__file__).resolve().parents[4]
MIXIN_TESTS = 18  # test_* methods of BaseEmailBackendTests in Django 4.2 and 5.2


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'django.sqlite3'}"
        return
    url = create_database(request.getfixturevalue("pg_server_url"))
    yield url
    drop_database(url)


def run_mixin(version: str, database: str, out: Path) -> dict[str, object]:
    try:
        found = sdist(version)
    except Unavailable as exc:
        pytest.skip(f"Django {version}'s sdist is not available: {exc}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAILOUT_", "SMTP_"))}
    # The sdist's django first: this Django, whatever the one installed.
    env["PYTHONPATH"] = os.pathsep.join([str(found.site), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.django_mail_suite", str(found.mail_tests),
         database, str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, object] = json.loads(out.read_text())
    return report


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(PINNED))
def test_djangos_backend_tests_pass_through_the_outbox(
    version: str, database: str, tmp_path: Path,
) -> None:
    report = run_mixin(version, database, tmp_path / "results.json")
    assert report["django"] == version
    results = report["results"]
    assert isinstance(results, dict)
    assert len(results) == MIXIN_TESTS, sorted(results)
    failing = {name: outcome for name, outcome in results.items() if outcome != "passed"}
    assert failing == {}, report["details"]
