"""Read models over mailout's tables, for the admin. Unmanaged: Django never alters
them; mailout's migrations own the tables (see ``migrations/0001_initial.py``).

Columns are a subset of ``mailout.db.schema``'s; the system check ``mailout.E001``
compares each field with its column (name and nullability). Changes go through
``mailout.db.actions`` (the admin actions), never through ``Model.save()``.
"""

from __future__ import annotations

from django.db import models

from mailout.models import Status


class Message(models.Model):
    """One outbox row (``mailout_messages``)."""

    id = models.BigAutoField(primary_key=True)
    idempotency_key = models.CharField(max_length=255)
    queue = models.CharField(max_length=64)
    priority = models.SmallIntegerField()
    status = models.CharField(max_length=16, choices=[(s.value, s.value) for s in Status])
    reason = models.CharField(max_length=64, null=True)
    recipient = models.CharField(max_length=320)
    sender = models.CharField(max_length=320, null=True)
    template = models.CharField(max_length=200, null=True)
    subject = models.TextField(null=True)
    message_id = models.CharField("Message-ID", max_length=255)
    provider_message_id = models.CharField("provider id", max_length=255, null=True)
    attempts = models.IntegerField()
    unknown_attempts = models.IntegerField()
    next_attempt_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True)
    last_reply_code = models.SmallIntegerField(null=True)
    last_reply_text = models.TextField(null=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    locale = models.CharField(max_length=35, null=True)

    class Meta:
        managed = False
        db_table = "mailout_messages"
        ordering = ["-id"]
        permissions = [("act_on_message", "Can retry, cancel and resolve messages")]

    def __str__(self) -> str:
        return f"#{self.id} {self.status} to {self.recipient}"


class Attempt(models.Model):
    """One delivery attempt of a message (``mailout_attempts``)."""

    id = models.BigAutoField(primary_key=True)
    message = models.ForeignKey(Message, models.DO_NOTHING, db_column="outbox_id",
                                related_name="attempt_log", db_constraint=False)
    attempt = models.IntegerField()
    outcome = models.CharField(max_length=16)
    stage = models.CharField(max_length=16, null=True)
    reply_code = models.SmallIntegerField(null=True)
    enhanced_code = models.CharField(max_length=16, null=True)
    reply_text = models.CharField(max_length=1000, null=True)
    detail = models.CharField(max_length=200, null=True)
    recipient = models.CharField(max_length=320, null=True)
    worker = models.CharField(max_length=200, null=True)
    transport = models.CharField(max_length=64, null=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "mailout_attempts"
        ordering = ["attempt", "id"]


class AuditEntry(models.Model):
    """One operator action (``mailout_audit``): who did what, when and why."""

    id = models.BigAutoField(primary_key=True)
    created_at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=32)
    target = models.CharField(max_length=500)
    reason = models.CharField(max_length=500, null=True)
    changed = models.IntegerField()
    skipped = models.IntegerField()

    class Meta:
        managed = False
        db_table = "mailout_audit"
        ordering = ["-id"]
