"""``manage.py mailout <command> ...``: every ``mailout`` CLI command on Django's database,
with Django's mail settings.

::

    python manage.py mailout worker                 # DATABASES[MAILOUT_DATABASE or "default"]
    python manage.py mailout --database replica status
    python manage.py mailout list --status dead

The database is the Django alias's (server, name, credentials: see
:func:`mailout.contrib.django.connection.database_url`), set as
``MAILOUT_DATABASE_URL`` for the command (and the worker processes it starts), so
nobody spells it twice. So are Django's mail settings: ``DEFAULT_FROM_EMAIL`` as
``MAIL_FROM`` and Django's SMTP server as ``SMTP_*``, where the environment does not
set them (:mod:`mailout.contrib.django.mail_settings`). The worker refuses to start on
a database without mailout's newest tables, saying to run ``manage.py migrate``.

The exit code is the CLI's; errors print as the CLI prints them. In the audit log,
actions are the CLI's (``MAILOUT_ACTOR`` or the login name).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mailout.contrib.django import mail_settings
from mailout.contrib.django.checks import HINT
from mailout.contrib.django.connection import database_url
from mailout.exceptions import ConfigError

URL_ENV = "MAILOUT_DATABASE_URL"
# The commands that send, or connect to the SMTP server: they need a valid sender.
SENDING = frozenset({"worker", "check"})


class Command(BaseCommand):
    help = "Run a mailout command (worker, status, list, show, retry...) on Django's database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default=None,
                            help="The DATABASES alias [default: MAILOUT_DATABASE or default].")
        parser.add_argument("mailout_args", nargs=argparse.REMAINDER, metavar="command ...",
                            help="A mailout command and its options (`mailout --help`).")

    def handle(self, *args: Any, **options: Any) -> None:
        from mailout.cli.main import run

        using = options["database"] or getattr(settings, "MAILOUT_DATABASE", "default")
        arguments = list(options["mailout_args"]) or ["--help"]
        command = next((a for a in arguments if not a.startswith("-")), None)
        try:
            variables = {URL_ENV: database_url(using), **_mail_variables(command)}
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        if command == "worker":
            _require_schema(using)
        with _environment(variables):  # worker processes started by the command inherit it
            rc = run(arguments, prog_name="manage.py mailout")
        if rc:
            raise CommandError(f"mailout exited with status {rc}", returncode=rc)


def _mail_variables(command: str | None) -> dict[str, str]:
    from django.core import mail

    # Django 6.1 added MAILERS, and mail.mailers with it (its documented test).
    found = mail_settings.worker_environment(settings, os.environ,
                                             has_mailers=hasattr(mail, "mailers"))
    if command in SENDING and mail_settings.FROM_VARIABLE in found:
        mail_settings.check_sender(settings)
    return found


def _require_schema(using: str) -> None:
    from mailout.contrib.django.schema_sync import revision_problem

    problem = revision_problem(using)
    if problem:
        raise CommandError(f"{problem}: {HINT}")


@contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    """``variables`` set in this process's environment for the block, then put back."""
    previous = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
