"""Helpers the HTTP API providers' tests share: each file sends through its own fake."""

from __future__ import annotations

import base64

from bench.support.providers.server import FakeProvider

from mailout.transports.base import SendResult
from tests.support.envelopes import full_envelope
from tests.support.transport_harness import build, provider_url


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def send_full(fake: FakeProvider, key: str = "order-9-invoice") -> SendResult:
    """Send the envelope that holds every field through ``fake``'s transport."""
    transport = build(provider_url(fake.name, fake.secret, fake.url))
    try:
        return await transport.send(full_envelope(key))
    finally:
        await transport.close()
