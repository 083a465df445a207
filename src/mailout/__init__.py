"""mailout: reliable transactional e-mail from a database outbox.

The application API is :func:`enqueue` (and its bulk and async twins); the worker,
CLI and operator tools live in their own modules.
"""

from mailout.enqueue import (
    EnqueueSettings,
    Message,
    enqueue,
    enqueue_async,
    enqueue_many,
    enqueue_many_async,
)
from mailout.exceptions import (
    ConfigError,
    IdempotencyConflict,
    InvalidMessage,
    MailoutError,
    NotFound,
    RenderError,
    SchemaMissing,
)
from mailout.models import EnqueueResult, Outcome, Status

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EnqueueResult",
    "EnqueueSettings",
    "IdempotencyConflict",
    "InvalidMessage",
    "MailoutError",
    "Message",
    "NotFound",
    "Outcome",
    "RenderError",
    "SchemaMissing",
    "Status",
    "__version__",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
]
