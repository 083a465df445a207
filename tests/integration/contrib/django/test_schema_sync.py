"""Django's ``migrate`` creates exactly mailout's tables, and the checks say so."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from django.core.management import call_command
from django.db import models
from django.test.utils import isolate_apps
from sqlalchemy import Engine

from mailout.contrib.django import migrations as django_migrations
from mailout.contrib.django.checks import databases_are_migrated, models_match_schema
from mailout.contrib.django.schema_sync import model_differences
from mailout.db import migrate
from mailout.db.schema import metadata
from tests.integration.db.test_migrations import compared_on
from tests.support.django_fixtures import DATABASES

pytestmark = pytest.mark.django_db(databases=list(DATABASES), transaction=True)


def test_the_django_migrated_database_matches_mailouts_tables(
    using: str, outside_engine: Engine,
) -> None:
    with outside_engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "compare_type": True, "version_table": migrate.VERSION_TABLE,
            "include_object": compared_on(outside_engine),
        })
        assert compare_metadata(ctx, metadata) == []
    assert migrate.current_revision(outside_engine) == migrate.head_revision()


def test_the_checks_pass_on_a_migrated_database(using: str) -> None:
    assert models_match_schema() == []
    assert databases_are_migrated(databases=[using]) == []
    call_command("check", databases=[using])  # raises SystemCheckError on any error


def test_the_revision_check_names_what_is_missing(using: str, outside_engine: Engine) -> None:
    from mailout.contrib.django.schema_sync import downgrade_to, upgrade_to

    downgrade_to(using, "0006")
    try:
        [error] = databases_are_migrated(databases=[using])
        assert error.id == "mailout.E002"
        assert "revision 0006" in error.msg
        assert migrate.head_revision() in error.msg
    finally:
        upgrade_to(using, "head")


@isolate_apps("mailout")
def test_a_model_that_disagrees_with_the_schema_is_reported() -> None:
    class Wrong(models.Model):
        recipient = models.CharField(max_length=320, null=True)  # NOT NULL in mailout
        colour = models.CharField(max_length=9)  # no such column

        class Meta:
            app_label = "mailout"
            managed = False
            db_table = "mailout_messages"

    problems = model_differences([Wrong])
    assert problems == [
        "Wrong.recipient: null=True but mailout_messages.recipient is NOT NULL",
        "Wrong.colour: no column 'colour' in mailout_messages",
    ]


def test_the_models_need_no_new_django_migration() -> None:
    call_command("makemigrations", "mailout", check=True, dry_run=True, verbosity=0)


def test_the_newest_django_migration_names_mailouts_head() -> None:
    names = sorted(m.name for m in pkgutil.iter_modules(django_migrations.__path__))
    newest = importlib.import_module(f"{django_migrations.__name__}.{names[-1]}")
    assert migrate.head_revision() == newest.MAILOUT_REVISION
