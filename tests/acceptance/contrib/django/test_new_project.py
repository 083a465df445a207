"""A newcomer's Django project, from ``startproject`` to a delivered message.

Each step is ``manage.py`` in a process of its own with the system checks on, as a
user runs it: ``migrate`` on an empty database (SQLite, PostgreSQL, MariaDB), then
``send_mail`` from ``manage.py shell``, then ``manage.py mailout worker --until-idle``
configured by Django's settings alone (no ``MAIL_FROM``, no ``SMTP_*``), delivering
over TCP to a real SMTP server. Nothing is called in the test's process.
"""

from __future__ import annotations

from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage as ParsedMessage
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer

from tests.support import mysql
from tests.support.fixtures import AUTH_PASSWORD, AUTH_USER
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


def test_mail_from_a_new_project_arrives_with_only_djangos_settings(
    project: NewProject, smtp_server: SmtpTestServer,
) -> None:
    project.add_settings(f'EMAIL_HOST = "{smtp_server.host}"\nEMAIL_PORT = {smtp_server.port}')
    for step in (("migrate",), ("shell", "-c", SEND), ("mailout", "worker", "--until-idle")):
        done = project.manage(*step)
        assert done.returncode == 0, f"{step}: {done.stderr}"
    [received] = smtp_server.messages
    assert received.mail_from == "site@example.com"
    assert received.rcpt_tos == ("ann@example.com",)
    assert not received.tls  # Django's EMAIL_USE_TLS is False by default
    parsed = message_from_bytes(received.data, policy=policy.default)
    assert isinstance(parsed, ParsedMessage)
    assert parsed["From"] == "Newsite <site@example.com>"
    assert parsed["Subject"] == "Welcome"
    body = parsed.get_body(("plain",))
    assert body is not None
    assert body.get_content().strip() == "Hello Ann"


@pytest.mark.parametrize("project", ["sqlite"], indirect=True)
def test_the_worker_logs_in_over_starttls_with_djangos_settings(
    project: NewProject, auth_smtp_server: SmtpTestServer,
) -> None:
    server = auth_smtp_server
    project.add_settings(f"""
EMAIL_HOST = "{server.host}"
EMAIL_PORT = {server.port}
EMAIL_USE_TLS = True
EMAIL_HOST_USER = "{AUTH_USER}"
EMAIL_HOST_PASSWORD = "{AUTH_PASSWORD}"
EMAIL_TIMEOUT = 10
""")
    assert project.manage("migrate").returncode == 0
    assert project.manage("shell", "-c", SEND).returncode == 0
    # The test CA is trusted the way any CA is: OpenSSL's default verify file.
    worker = project.manage("mailout", "worker", "--until-idle",
                            SSL_CERT_FILE=str(server.ca_file))
    assert worker.returncode == 0, worker.stderr
    [received] = server.messages
    assert received.tls
    assert received.auth_user == AUTH_USER
    assert AUTH_PASSWORD not in worker.stdout + worker.stderr
