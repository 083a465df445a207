"""mailout's tables, created by mailout's own migrations on Django's connection.

The tables are exactly those of ``mailout db upgrade`` (the same Alembic history,
run in this migration's transaction), and mailout records its revision in
``mailout_alembic_version`` as usual, so the worker and the CLI accept the database.
The models are unmanaged: Django reads them (admin) but never alters the tables.
Each later mailout revision comes with a Django migration naming it in
``MAILOUT_REVISION``; a test checks that the newest one names mailout's head.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from mailout.contrib.django.schema_sync import downgrade_to, upgrade_to

MAILOUT_REVISION = "0007"


def _forward(apps: Any, schema_editor: Any) -> None:
    upgrade_to(schema_editor.connection.alias, MAILOUT_REVISION)


def _backward(apps: Any, schema_editor: Any) -> None:
    downgrade_to(schema_editor.connection.alias, "base")


def _unmanaged(table: str) -> dict[str, Any]:
    return {"db_table": table, "managed": False}


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.RunPython(_forward, _backward),
        migrations.CreateModel(
            name="Message",
            fields=[("id", models.BigAutoField(primary_key=True, serialize=False))],
            options={**_unmanaged("mailout_messages"), "ordering": ["-id"],
                     "permissions": [("act_on_message",
                                      "Can retry, cancel and resolve messages")]},
        ),
        migrations.CreateModel(
            name="Attempt",
            fields=[("id", models.BigAutoField(primary_key=True, serialize=False))],
            options={**_unmanaged("mailout_attempts"), "ordering": ["attempt", "id"]},
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[("id", models.BigAutoField(primary_key=True, serialize=False))],
            options={**_unmanaged("mailout_audit"), "ordering": ["-id"]},
        ),
    ]
