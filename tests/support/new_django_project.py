"""A Django project made as a newcomer makes one: ``django-admin startproject``, a few
lines added at the end of its ``settings.py``, and ``manage.py`` run in processes of
their own with the system checks on (never ``call_command``, which skips them).

The database is the project's own SQLite file, or a fresh database on the test
PostgreSQL or MariaDB server, made empty for the project and dropped afterwards. The
processes get none of mailout's variables (``MAIL_FROM``, ``SMTP_*``, ``MAILOUT_*``)
and not the test suite's ``DJANGO_SETTINGS_MODULE``: what they do comes from the
project's settings alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.support import pg
from sqlalchemy.engine import make_url

from tests.support import mysql

NAME = "newsite"
COMMAND_TIMEOUT = 180  # seconds: migrate and a worker on a loaded machine
# Variables a newcomer's shell would not have: mailout's own, and the test project's.
_LEFT_OUT = ("MAILOUT_", "SMTP_", "MAIL_FROM", "DJANGO_SETTINGS_MODULE")


@dataclass
class NewProject:
    """A project made by ``startproject`` in ``root`` (the folder of ``manage.py``)."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def settings_file(self) -> Path:
        return self.root / NAME / "settings.py"

    def add_settings(self, text: str) -> None:
        """Append ``text`` to ``settings.py``, as a newcomer pastes lines at its end."""
        with self.settings_file.open("a", encoding="utf-8") as f:
            f.write("\n" + text.strip() + "\n")

    def manage(self, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        """``python manage.py <args>`` in the project's folder, checks on."""
        return subprocess.run([sys.executable, "manage.py", *args], cwd=self.root,
                              env={**self.env, **extra_env}, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL, check=False)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_LEFT_OUT)}


def start_project(parent: Path) -> NewProject:
    """``django-admin startproject newsite`` in ``parent``."""
    env = clean_env()
    subprocess.run([sys.executable, "-m", "django", "startproject", NAME, str(parent)],
                   env=env, check=True, capture_output=True, timeout=COMMAND_TIMEOUT)
    return NewProject(parent, env)


def databases_setting(url: str) -> str:
    """``DATABASES = {...}`` for the server database ``url`` (PostgreSQL or MariaDB)."""
    parsed = make_url(url)
    engine = "postgresql" if parsed.get_backend_name() == "postgresql" else "mysql"
    conf = {"ENGINE": f"django.db.backends.{engine}", "NAME": parsed.database,
            "USER": parsed.username or "", "PASSWORD": parsed.password or "",
            "HOST": parsed.host or "127.0.0.1", "PORT": str(parsed.port or "")}
    return f"DATABASES = {{'default': {conf!r}}}"


@contextmanager
def empty_database(kind: str, pg_server_url: str) -> Iterator[str | None]:
    """An empty database on the test server of ``kind`` ("postgresql", "mariadb"),
    dropped afterwards; None for "sqlite" (the project's own file)."""
    if kind == "sqlite":
        yield None
        return
    if kind == "postgresql":
        url = pg.create_database(pg_server_url)
        try:
            yield url
        finally:
            pg.drop_database(url)
        return
    server = mysql.mysql_server_url()
    assert server is not None, "the caller skips MariaDB without MAILOUT_TEST_MYSQL_URL"
    url = mysql.create_database(server)
    try:
        yield url
    finally:
        mysql.drop_database(url)
