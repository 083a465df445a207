"""Host names and addresses: which ones stay on this machine.

Used where loopback is the safe default (servers bind it, clear-text AUTH is only
allowed to it, the console's --no-auth only on it). No I/O: names are not resolved.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for ``localhost`` (and ``*.localhost``, RFC 6761), 127.0.0.0/8 and ::1,
    with or without IPv6 brackets."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
