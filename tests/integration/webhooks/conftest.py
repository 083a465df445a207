"""Fixtures for the webhook tests: one receiver app over real HTTP that knows every
provider's secrets, and the keys and certificate server the signed providers need."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bench.support import webhooks as w
from bench.support.tls import TestCerts
from sqlalchemy import Engine

from mailout.webhooks.app import create_app
from mailout.webhooks.handler import WebhookHandler
from tests.integration.webhooks.receiving import Hook, settings_for


@pytest.fixture(scope="module")
def sendgrid_keys() -> w.SendgridKeys:
    return w.SendgridKeys()


@pytest.fixture(scope="module")
def sns(test_certs: TestCerts) -> Iterator[tuple[w.SnsSigner, w.CertServer]]:
    signer = w.SnsSigner()
    server = w.CertServer(test_certs, signer)
    yield signer, server
    server.close()


@pytest.fixture
def hook(engine: Engine, sendgrid_keys: w.SendgridKeys,
         sns: tuple[w.SnsSigner, w.CertServer], test_certs: TestCerts) -> Iterator[Hook]:
    _signer, cert_server = sns
    handler = WebhookHandler(engine, settings_for(sendgrid_keys, cert_server, test_certs))
    with w.serving(create_app(handler=handler)) as server:
        yield Hook(server, handler, engine)
