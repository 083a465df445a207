"""``manage.py mailout <command> ...``: every ``mailout`` CLI command on Django's database.

::

    python manage.py mailout worker                 # DATABASES[MAILOUT_DATABASE or "default"]
    python manage.py mailout --database replica status
    python manage.py mailout list --status dead

The database is the Django alias's (server, name, credentials: see
:func:`mailout.contrib.django.connection.database_url`), set as
``MAILOUT_DATABASE_URL`` for the command (and the worker processes it starts), so
nobody spells it twice. The exit code is the CLI's; errors print as the CLI prints
them. In the audit log, actions are the CLI's (``MAILOUT_ACTOR`` or the login name).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mailout.contrib.django.connection import database_url
from mailout.exceptions import ConfigError

URL_ENV = "MAILOUT_DATABASE_URL"


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
        try:
            url = database_url(using)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        previous = os.environ.get(URL_ENV)
        os.environ[URL_ENV] = url  # worker processes started by the command inherit it
        try:
            rc = run(list(options["mailout_args"]) or ["--help"],
                     prog_name="manage.py mailout")
        finally:
            if previous is None:
                os.environ.pop(URL_ENV, None)
            else:
                os.environ[URL_ENV] = previous
        if rc:
            raise CommandError(f"mailout exited with status {rc}", returncode=rc)
