"""The exception hierarchy.

Every error mailout raises derives from :class:`MailoutError`; each subclass also
inherits the builtin it behaves like, so callers can catch either.
"""

from __future__ import annotations


class MailoutError(Exception):
    """Root of every error raised by mailout."""


class InvalidMessage(MailoutError, ValueError):
    """A message was rejected at enqueue; nothing was written.

    ``field`` names the offending argument (``to``, ``subject``, ``key``...).
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class TemplateNotFound(InvalidMessage):
    """Enqueue found no such template where the worker renders from; nothing was written.

    ``template`` is the name asked for and ``folder`` the templates folder looked in
    (absolute: ``MAILOUT_TEMPLATES``, else ``./templates``). ``field`` is ``template``.
    An app that enqueues where the templates are not (they live with the worker)
    sets ``MAILOUT_TEMPLATES_CHECK=off``.
    """

    def __init__(self, template: str, folder: str, reason: str) -> None:
        self.template = template
        self.folder = folder
        super().__init__("template", reason)


class IdempotencyConflict(MailoutError, ValueError):
    """A key was enqueued again with different content.

    The first row wins and stays untouched; ``differing`` lists the fields
    that differ, ``existing_id`` is the row that holds the key.
    """

    def __init__(self, key: str, existing_id: int, differing: tuple[str, ...]) -> None:
        self.key = key
        self.existing_id = existing_id
        self.differing = differing
        super().__init__(
            f"idempotency key {key!r} already holds message {existing_id} "
            f"with different {', '.join(differing)}"
        )


class ConfigError(MailoutError, ValueError):
    """A setting has a bad value; ``setting`` names its environment variable."""

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        self.reason = reason
        super().__init__(f"{setting}: {reason}")


class RenderError(MailoutError, ValueError):
    """A message could not be rendered (missing template, undefined param...).

    A render error is permanent for that message: retrying cannot fix it.
    """

    def __init__(self, template: str | None, reason: str) -> None:
        self.template = template
        self.reason = reason
        super().__init__(f"template {template!r}: {reason}" if template else reason)


class SchemaMissing(MailoutError, RuntimeError):
    """The database has no mailout tables, or an older revision of them."""


class NotFound(MailoutError, LookupError):
    """No message matches the given id, key, Message-ID or provider id."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"no message matches {ref!r}")


class WorkerFailed(MailoutError, RuntimeError):
    """A worker stopped because one of its side tasks kept failing.

    ``task`` names it (``mailout-heartbeat``...), ``failures`` counts its failures in a
    row, ``error`` is the last one's type and ``where`` the line that raised it (the
    message itself may quote SQL parameters, so it is not kept).
    """

    def __init__(self, task: str, failures: int, error: str, where: str) -> None:
        self.task = task
        self.failures = failures
        self.error = error
        self.where = where
        super().__init__(f"side task {task} failed {failures} times in a row "
                         f"(last: {error} at {where})")
