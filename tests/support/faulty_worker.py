"""``mailout`` with a lease heartbeat that raises: for the supervision tests only.

``python -m tests.support.faulty_worker worker ...`` makes the heartbeat's database
call, ``mailout.db.leasing.extend_leases``, raise ``RuntimeError`` on its first
``MAILOUT_TEST_HEARTBEAT_FAULTS`` calls (``always``: on every call), then runs the
``mailout`` command line in this process: a real worker process with a bug put into
its heartbeat from outside. mailout itself has no such hook.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from mailout.cli.main import main
from mailout.db import leasing

FAULTS_VAR = "MAILOUT_TEST_HEARTBEAT_FAULTS"


def _install() -> None:
    setting = os.environ.get(FAULTS_VAR, "0")
    limit = None if setting == "always" else int(setting)
    real = leasing.extend_leases
    calls = 0
    lock = threading.Lock()  # the heartbeat calls it from a worker thread

    def extend_leases(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        with lock:
            calls += 1
            failing = limit is None or calls <= limit
        if failing:
            raise RuntimeError(f"injected heartbeat fault {calls}")
        return real(*args, **kwargs)

    leasing.extend_leases = extend_leases  # type: ignore[assignment]


if __name__ == "__main__":
    _install()
    sys.argv[0] = "mailout"
    main()
