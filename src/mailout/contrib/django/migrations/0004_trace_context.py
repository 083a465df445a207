"""mailout revision 0010: the W3C trace context a message was enqueued under
(``mailout_messages.traceparent``, ``tracestate``), which the worker's send spans link to."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from mailout.contrib.django.schema_sync import downgrade_to, upgrade_to

MAILOUT_REVISION = "0010"


def _forward(apps: Any, schema_editor: Any) -> None:
    upgrade_to(schema_editor.connection.alias, MAILOUT_REVISION)


def _backward(apps: Any, schema_editor: Any) -> None:
    downgrade_to(schema_editor.connection.alias, "0009")


class Migration(migrations.Migration):
    dependencies = [("mailout", "0003_whole_messages")]

    operations = [migrations.RunPython(_forward, _backward)]
