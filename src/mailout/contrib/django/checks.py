"""System checks (``manage.py check``): the models agree with mailout's tables
(``mailout.E001``), and, with ``--database``, that the outbox's database
(``MAILOUT_DATABASE``) is at mailout's newest revision (``mailout.E002``)."""

from __future__ import annotations

from typing import Any

from django.core import checks


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

    errors: list[checks.CheckMessage] = []
    outbox = getattr(settings, "MAILOUT_DATABASE", "default")
    for using in databases or ():
        if using != outbox:  # only the database the backend writes to holds the outbox
            continue
        problem = revision_problem(using)
        if problem:
            errors.append(checks.Error(problem, hint="run `manage.py migrate` (or "
                                       "`manage.py mailout db upgrade`)", id="mailout.E002"))
    return errors
