"""Loading a claimed message's attachments, with a small cache of contents.

The same content often rides on many messages (terms and conditions on every
invoice): a content read once is kept, up to a byte budget, and later messages
read only their link rows. Runs in a worker thread (it does database I/O).
"""

from __future__ import annotations

import threading

from sqlalchemy import Engine

from mailout.db import attachments
from mailout.models import Attachment
from mailout.support.bounded_cache import BoundedCache

CACHE_BYTES = 32 * 1024 * 1024
CACHE_ITEM_BYTES = 1024 * 1024  # shared files (terms, logos) are small; large ones pass through
# Reading a content costs a transient of about three times its size (the driver's hex
# text and the bytes): at most this many reads at once, whatever the concurrency.
CONCURRENT_READS = 2


class AttachmentLoader:
    """``loader(outbox_id)`` -> the message's attachments, in order. Thread-safe.

    Contents of at most ``CACHE_ITEM_BYTES`` are cached by digest, least recently
    used first out, up to ``cache_bytes``; larger ones are read for each message.
    At most ``CONCURRENT_READS`` messages read at once, which bounds the memory that
    reading large attachments takes.
    """

    def __init__(self, engine: Engine, cache_bytes: int = CACHE_BYTES) -> None:
        self._engine = engine
        self._cache: BoundedCache[str, bytes] = BoundedCache(max(cache_bytes, 1), weigh=len)
        self._reads = threading.BoundedSemaphore(CONCURRENT_READS)

    def __call__(self, outbox_id: int) -> tuple[Attachment, ...]:
        known = self._cache.snapshot()
        with self._reads, self._engine.connect() as conn:
            items = attachments.for_message(conn, outbox_id, known)
        for item in items:
            self._remember(item.sha256, item.content)
        return attachments.as_attachments(items)

    def _remember(self, sha: str, content: bytes) -> None:
        if self._cache.get(sha) is None and len(content) <= CACHE_ITEM_BYTES:
            self._cache.put(sha, content)  # refused when over the whole budget alone
