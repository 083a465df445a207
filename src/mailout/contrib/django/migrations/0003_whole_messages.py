"""mailout revision 0009: messages stored whole (``mailout_messages.mime``), the bytes
Django built, which the SMTP transport sends as they are."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from mailout.contrib.django.schema_sync import downgrade_to, upgrade_to

MAILOUT_REVISION = "0009"


def _forward(apps: Any, schema_editor: Any) -> None:
    upgrade_to(schema_editor.connection.alias, MAILOUT_REVISION)


def _backward(apps: Any, schema_editor: Any) -> None:
    downgrade_to(schema_editor.connection.alias, "0008")


class Migration(migrations.Migration):
    dependencies = [("mailout", "0002_event_reasons")]

    operations = [migrations.RunPython(_forward, _backward)]
