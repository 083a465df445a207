"""Start-up: what ``import mailout`` costs an application, and the floor under a worker's
time to its first claim.

Each figure is the best of ``runs`` fresh interpreters (``python -c``), minus an empty
interpreter's start, so the figure is the import alone:

* ``import mailout``, and which heavy modules it loaded (an application that only
  enqueues should load neither the worker, Jinja nor Rich);
* the libraries a worker cannot start without (SQLAlchemy's engine, psycopg, Jinja,
  aiosmtplib): no worker reaches its first claim sooner than these load.

    .venv/bin/python -m bench.startup [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from bench.common import compile_sources

HEAVY = ("mailout.worker", "jinja2", "rich", "sqlalchemy", "aiosmtplib", "click")
WORKER_LIBRARIES = "import sqlalchemy.engine, psycopg, jinja2, aiosmtplib"


@dataclass(frozen=True)
class Startup:
    import_mailout: float  # seconds, interpreter start taken off
    loaded: list[str]  # which of HEAVY ``import mailout`` loaded
    worker_libraries: float  # seconds to import what every worker needs


def _best(code: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def measure(runs: int = 7) -> Startup:
    compile_sources(dict(os.environ))  # as installed: no compiling at each import
    empty = _best("pass", runs)
    probe = ("import sys, json, mailout; "
             f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], check=True,
                                       capture_output=True, text=True).stdout)
    return Startup(max(0.0, _best("import mailout", runs) - empty), loaded,
                   max(0.0, _best(WORKER_LIBRARIES, runs) - empty))


def describe(s: Startup) -> str:
    heavy = ", ".join(s.loaded) or "none of " + ", ".join(HEAVY)
    return (f"import mailout: {s.import_mailout * 1000:.0f} ms, loads {heavy}; the libraries "
            f"every worker needs import in {s.worker_libraries * 1000:.0f} ms (the floor under "
            "the time to the first claim)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh interpreters per figure")
    print(describe(measure(ap.parse_args().runs)))


if __name__ == "__main__":
    main()
