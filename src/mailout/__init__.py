"""mailout: reliable transactional e-mail from a database outbox.

The application API is :func:`enqueue` (and its bulk and async twins); the worker,
CLI and operator tools live in their own modules. Names are imported on first use,
so that ``mailout`` commands do not pay for the enqueue path's imports.

No submodule may be named like a public name: importing ``mailout.x`` sets the
package attribute ``x`` to the submodule, which would hide the function ``x``
(the enqueue functions live in ``mailout.outbox`` for that reason).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mailout.db.migrate import upgrade_database
    from mailout.db.operator import count_messages
    from mailout.exceptions import (
        ConfigError,
        IdempotencyConflict,
        InvalidMessage,
        MailoutError,
        NotFound,
        RenderError,
        SchemaMissing,
        TemplateNotFound,
    )
    from mailout.models import Attachment, EnqueueResult, Mailbox, Outcome, Status
    from mailout.outbox import (
        EnqueueSettings,
        Message,
        NotifyMode,
        enqueue,
        enqueue_async,
        enqueue_many,
        enqueue_many_async,
    )

__version__ = "0.1.0"

_EXPORTS = {
    "mailout.outbox": ("EnqueueSettings", "Message", "NotifyMode", "enqueue", "enqueue_async",
                       "enqueue_many", "enqueue_many_async"),
    "mailout.exceptions": ("ConfigError", "IdempotencyConflict", "InvalidMessage",
                           "MailoutError", "NotFound", "RenderError", "SchemaMissing",
                           "TemplateNotFound"),
    "mailout.models": ("Attachment", "EnqueueResult", "Mailbox", "Outcome", "Status"),
    "mailout.db.migrate": ("upgrade_database",),
    "mailout.db.operator": ("count_messages",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "Attachment",
    "ConfigError",
    "EnqueueResult",
    "EnqueueSettings",
    "IdempotencyConflict",
    "InvalidMessage",
    "Mailbox",
    "MailoutError",
    "Message",
    "NotFound",
    "NotifyMode",
    "Outcome",
    "RenderError",
    "SchemaMissing",
    "Status",
    "TemplateNotFound",
    "__version__",
    "count_messages",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "upgrade_database",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mailout' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
