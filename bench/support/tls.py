"""Test TLS material: a throwaway trustme CA and a server certificate for loopback.

``make_test_certs(directory)`` writes the CA certificate to ``directory/ca.pem``
(for ``SmtpSettings.ca_file``) and returns it with a server-side SSL context that
presents a certificate for ``127.0.0.1``, ``::1`` and ``localhost``. A second call
gives an unrelated CA: a client trusting one rejects the other's server.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class TestCerts:
    """A CA, the PEM file a client trusts it from, and a server context it signed."""

    __test__ = False  # not a pytest test class

    ca: trustme.CA
    ca_file: Path
    server_context: ssl.SSLContext

    def client_context(self) -> ssl.SSLContext:
        """A verifying client context trusting this CA only."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        return context


def server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    """A server-side context presenting a cert for ``names`` (loopback by default)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*(names or LOOPBACK_NAMES)).configure_cert(context)
    return context


def make_test_certs(directory: Path, *names: str) -> TestCerts:
    """A new CA (PEM written into ``directory``) and a server context it signed."""
    ca = trustme.CA()
    directory.mkdir(parents=True, exist_ok=True)
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return TestCerts(ca=ca, ca_file=ca_file, server_context=server_context(ca, *names))
