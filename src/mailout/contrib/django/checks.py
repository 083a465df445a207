"""System checks (``manage.py check``): the models agree with mailout's tables
(``mailout.E001``), and, with ``--database``, that the outbox's database
(``MAILOUT_DATABASE``) is at mailout's newest revision (``mailout.E002``).

E002 is a database check, and Django's ``migrate`` runs the database checks before it
migrates: an error there would stop the one command that creates the tables (a new
project could never migrate). So E002 says nothing while ``migrate`` runs; it is
reported by ``manage.py check --database``, by ``manage.py mailout worker`` and by the
admin pages.
"""

from __future__ import annotations

import inspect
from typing import Any

from django.core import checks

HINT = "run `manage.py migrate`"


def register() -> None:
    checks.register(models_match_schema, checks.Tags.models)
    checks.register(databases_are_migrated, checks.Tags.database)


def models_match_schema(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.apps import apps

    from mailout.contrib.django.schema_sync import model_differences

    models = list(apps.get_app_config("mailout").get_models())
    return [checks.Error(problem, hint="the models and mailout.db.schema must describe "
                         "the same tables", id="mailout.E001")
            for problem in model_differences(models)]


def databases_are_migrated(app_configs: Any = None, databases: Any = None,
                           **kwargs: Any) -> list[checks.CheckMessage]:
    from django.conf import settings

    from mailout.contrib.django.schema_sync import revision_problem

    if not databases or migrate_is_running():
        return []
    errors: list[checks.CheckMessage] = []
    outbox = getattr(settings, "MAILOUT_DATABASE", "default")
    for using in databases:
        if using != outbox:  # only the database the backend writes to holds the outbox
            continue
        problem = revision_problem(using)
        if problem:
            errors.append(checks.Error(problem, hint=HINT, id="mailout.E002"))
    return errors


def migrate_is_running() -> bool:
    """Is Django's ``migrate`` command (or a subclass of it) what runs these checks?

    Django tells a check which databases to look at, never which command asked, so
    the command is looked for on the call stack: ``migrate`` runs its checks from its
    own ``execute`` (Django 5.x) or ``handle`` (4.2).
    """
    from django.core.management.commands.migrate import Command as Migrate

    frame = inspect.currentframe()
    try:
        while frame is not None:
            if isinstance(frame.f_locals.get("self"), Migrate):
                return True
            frame = frame.f_back
        return False
    finally:
        del frame  # a frame held in a local keeps every caller's locals alive
