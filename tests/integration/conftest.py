"""Hooks for the integration tests: the transports' suites run on both event loops.

What the SMTP transport does on a connection depends on how the loop delivers
socket events (a close that came with the 354 must be seen before any content is
written; pipelined replies are read back to back), and a worker runs on uvloop when
it is installed (``MAILOUT_EVENT_LOOP``). So these suites run on asyncio's loop and
on uvloop; every other async test on asyncio's. The test servers keep their own
loops (asyncio's), so only the code under test changes loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import uvloop

BOTH_LOOPS = frozenset({"transports/smtp/test_client.py", "transports/smtp/test_recipients.py",
                        "transports/smtp/test_auth_safety.py", "transports/smtp/test_after_354.py",
                        "transports/test_contract.py"})
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
_ASYNCIO: Mapping[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
_BOTH: Mapping[str, LoopFactory] = {**_ASYNCIO, "uvloop": uvloop.new_event_loop}


def pytest_asyncio_loop_factories(config: pytest.Config,
                                  item: pytest.Item) -> Mapping[str, LoopFactory]:
    here = Path(__file__).parent
    inside = item.path.is_relative_to(here)
    return _BOTH if inside and item.path.relative_to(here).as_posix() in BOTH_LOOPS else _ASYNCIO
