"""A newcomer's Django project, from ``startproject`` to a delivered message.

Each step is ``manage.py`` in a process of its own with the system checks on, as a
user runs it: ``migrate`` on an empty database (SQLite, PostgreSQL, MariaDB), then
``send_mail`` from ``manage.py shell``, then ``manage.py mailout worker --until-idle``
configured by Django's settings alone (no ``MAIL_FROM``, no ``SMTP_*``), delivering
over TCP to a real SMTP server. Nothing is called in the test's process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import mysql
from tests.support.new_django_project import (
    NewProject,
    databases_setting,
    empty_database,
    start_project,
)

pytestmark = pytest.mark.slow

KINDS = ["sqlite", "postgresql",
         pytest.param("mariadb", marks=pytest.mark.skipif(mysql.mysql_server_url() is None,
                                                          reason=mysql.SKIP_REASON))]

# What the README's Django section has a newcomer add to settings.py.
MAILOUT_APP = """
INSTALLED_APPS += ["mailout.contrib.django"]
EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"
DEFAULT_FROM_EMAIL = "Newsite <site@example.com>"
"""
SEND = ("from django.core.mail import send_mail; "
        "send_mail('Welcome', 'Hello Ann', None, ['ann@example.com'])")


@pytest.fixture(params=KINDS)
def project(request: pytest.FixtureRequest, tmp_path: Path,
            pg_server_url: str) -> Iterator[NewProject]:
    """A new project with mailout added, on an empty database of the parameter's kind."""
    with empty_database(request.param, pg_server_url) as url:
        made = start_project(tmp_path)
        made.add_settings(MAILOUT_APP)
        if url is not None:
            made.add_settings(databases_setting(url))
        yield made


def test_a_new_project_migrates_with_its_checks_on(project: NewProject) -> None:
    migrated = project.manage("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying mailout.0001_initial... OK" in migrated.stdout
    checked = project.manage("check", "--database", "default")
    assert checked.returncode == 0, checked.stderr


def test_a_missing_schema_is_reported_by_check_and_by_the_worker(project: NewProject) -> None:
    checked = project.manage("check", "--database", "default")
    assert checked.returncode == 1
    assert "mailout.E002" in checked.stderr
    assert "has no mailout tables" in checked.stderr
    worker = project.manage("mailout", "worker", "--until-idle")
    assert worker.returncode == 1
    assert "has no mailout tables" in worker.stderr
    assert "manage.py migrate" in worker.stderr
