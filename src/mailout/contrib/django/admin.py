"""Django admin pages for mailout's messages: list, search, detail with the attempt
log and the operator history, and the operator actions.

Pages are read-only (no add, change or delete: rows change through the actions
only). The actions are the CLI's and the console's (``mailout.db.actions``), so they
follow the same rules: retry requeues reviewed dead, failed, unknown or cancelled
rows with their Message-ID and key kept, never a blind resend of anything else;
cancel withdraws pending rows; resolve settles rows parked in ``unknown``. Each asks
for confirmation on a page listing the selected messages (with an optional reason),
and each is written to mailout's audit log as ``"<username> (django admin)"``.

Viewing needs ``mailout.view_message``; acting needs ``mailout.act_on_message``
(anyone else gets 403). Rows are read from ``MAILOUT_DATABASE``. When that database
lacks mailout's newest tables, the pages say so and name ``manage.py migrate`` (503)
instead of failing on a missing table.

An action reads the rows' states, then writes. On SQLite a transaction that read
before a worker committed cannot write ("database is locked", at once), so the list
page is exempt from ``ATOMIC_REQUESTS`` on the outbox database and each action runs in
a transaction of its own, run again after such a conflict
(:func:`~mailout.contrib.django.connection.run_borrowed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html_join

from mailout.contrib.django.connection import borrowed_connection, run_borrowed
from mailout.contrib.django.models import Attempt, Message
from mailout.db import actions, audit, operator

ACT_PERMISSION = "mailout.act_on_message"
Run = Callable[..., operator.Change]


def outbox_database() -> str:
    return str(getattr(settings, "MAILOUT_DATABASE", "default"))


class _OutboxDatabase(frozenset[str]):
    """The aliases a view is exempt from ``ATOMIC_REQUESTS`` on
    (``transaction.non_atomic_requests``): the outbox database as configured when the
    request comes. Django asks ``alias in view._non_atomic_requests`` on each request."""

    def __contains__(self, alias: object) -> bool:
        return alias == outbox_database()


def actor_of(request: HttpRequest) -> str:
    """Who acted, as the audit log shows it."""
    return f"{request.user.get_username()} (django admin)"


class AttemptInline(admin.TabularInline):
    """The attempt log, oldest first."""

    model = Attempt
    fields = ("attempt", "outcome", "stage", "reply_code", "enhanced_code", "reply_text",
              "detail", "recipient", "transport", "worker", "started_at", "finished_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(outbox_database())

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm("mailout.view_message"))  # part of the message

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("id", "status", "queue", "template", "recipient", "subject", "attempts",
                    "created_at", "sent_at")
    list_filter = ("status", "queue", "template", ("created_at", admin.DateFieldListFilter))
    # Keys and ids exactly (they are indexed), recipients by part.
    search_fields = ("=idempotency_key", "=message_id", "=provider_message_id", "recipient")
    readonly_fields = ("operator_history",)
    inlines = (AttemptInline,)
    actions = ("retry", "cancel", "resolve_as_sent", "resolve_by_resending")
    list_per_page = 50
    show_full_result_count = False  # no count(*) over millions of rows per page

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(outbox_database())

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Message._meta.concrete_fields] + ["operator_history"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.get_fields(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only pages: rows change through the actions

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_act_on_message_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(ACT_PERMISSION))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # Django drops an action the user may not run and redirects; an attempt to
        # act without the permission is refused outright instead.
        if request.method == "POST" and request.POST.get("action") in self.actions \
                and not self.has_act_on_message_permission(request):
            raise PermissionDenied
        return self._unmigrated(request) or super().changelist_view(request, extra_context)

    # Django's own decorator takes a fixed alias; the outbox's is read per request.
    changelist_view._non_atomic_requests = _OutboxDatabase()  # type: ignore[attr-defined]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: Any = None) -> Any:
        return (self._unmigrated(request)
                or super().change_view(request, object_id, form_url, extra_context))

    def _unmigrated(self, request: HttpRequest) -> HttpResponse | None:
        """A page naming what is missing when the outbox database lacks mailout's newest
        tables (a database error otherwise); None when it has them. Only for those who
        may view the messages: the page names a database."""
        from mailout.contrib.django.schema_sync import revision_problem

        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        problem = revision_problem(outbox_database())
        if problem is None:
            return None
        return TemplateResponse(request, "mailout/admin/schema_missing.html", {
            **self.admin_site.each_context(request), "title": "mailout's tables are missing",
            "problem": problem, "database": outbox_database(), "opts": self.model._meta,
        }, status=503)  # the pages come back once the database is migrated

    @admin.display(description="Operator actions")
    def operator_history(self, obj: Message) -> str:
        with borrowed_connection(outbox_database()) as conn:
            entries = audit.for_message(conn, obj.id)
        if not entries:
            return "none"
        return str(format_html_join(
            "\n", "<div>{} {}: {} {}</div>",
            ((e.created_at.strftime("%Y-%m-%d %H:%M:%S"), e.actor, e.action,
              f"({e.reason})" if e.reason else "") for e in entries)))

    @admin.action(description="Retry reviewed messages (dead, failed, unknown, cancelled)",
                  permissions=["act_on_message"])
    def retry(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self._act(request, queryset, "retry", "Requeue", "requeued", actions.retry)

    @admin.action(description="Cancel pending messages", permissions=["act_on_message"])
    def cancel(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self._act(request, queryset, "cancel", "Cancel", "cancelled", actions.cancel)

    @admin.action(description="Resolve unknown messages: the provider delivered them",
                  permissions=["act_on_message"])
    def resolve_as_sent(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self._act(request, queryset, "resolve_as_sent", "Mark as sent", "marked sent",
                         _resolver(actions.Resolution.SENT))

    @admin.action(description="Resolve unknown messages: not delivered, send again",
                  permissions=["act_on_message"])
    def resolve_by_resending(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self._act(request, queryset, "resolve_by_resending", "Send again",
                         "requeued", _resolver(actions.Resolution.RETRY))

    def _act(self, request: HttpRequest, queryset: Any, action: str, title: str, done: str,
             run: Run) -> HttpResponse | None:
        """Confirm first (a page listing the messages), then act and report."""
        selected = list(queryset)
        if request.POST.get("confirmed") != "yes":
            return TemplateResponse(request, "mailout/admin/confirm_action.html", {
                **self.admin_site.each_context(request), "title": f"{title}?",
                "action": action, "selected": selected, "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            })
        reason = request.POST.get("reason", "").strip() or None
        ids, actor = [m.id for m in selected], actor_of(request)
        # Read, then write: on SQLite a worker's commit in between refuses the write.
        change = run_borrowed(outbox_database(),
                              lambda conn: run(conn, ids, actor=actor, reason=reason))
        self.message_user(request, f"{done} {len(change.changed)}", messages.SUCCESS)
        if change.skipped:
            why = ", ".join(f"{i} ({status})" for i, status in change.skipped.items())
            self.message_user(request, f"left alone {len(change.skipped)}: {why}",
                              messages.WARNING)
        return None


def _resolver(resolution: actions.Resolution) -> Run:
    def run(conn: Any, ids: list[int], *, actor: str, reason: str | None) -> operator.Change:
        return actions.resolve(conn, ids, resolution, actor=actor, reason=reason)
    return run
