"""The Django app: label ``mailout``, its checks registered when Django is ready."""

from __future__ import annotations

from django.apps import AppConfig


class MailoutConfig(AppConfig):
    name = "mailout.contrib.django"
    label = "mailout"
    verbose_name = "mailout"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mailout.contrib.django import checks

        checks.register()
