"""mailout revision 0008: bounce reasons and authentication-failure reports on
``mailout_events`` (the table has no Django model; this keeps the revision in step)."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from mailout.contrib.django.schema_sync import downgrade_to, upgrade_to

MAILOUT_REVISION = "0008"


def _forward(apps: Any, schema_editor: Any) -> None:
    upgrade_to(schema_editor.connection.alias, MAILOUT_REVISION)


def _backward(apps: Any, schema_editor: Any) -> None:
    downgrade_to(schema_editor.connection.alias, "0007")


class Migration(migrations.Migration):
    dependencies = [("mailout", "0001_initial")]

    operations = [migrations.RunPython(_forward, _backward)]
