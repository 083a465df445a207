"""What checking a template's params costs enqueue, on SQLite (issue 16 item 7).

``enqueue_many`` of the example order confirmation, with and without a templates
folder to check against (the folder makes enqueue resolve the variant and compare
the params with the variables the template uses, cached per variant), in
alternating rounds. Prints messages per second for each and the ratio.

    .venv/bin/python bench/template_check.py [--messages 2000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mailout import db
from mailout.db import migrate
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_many

TEMPLATES = Path(__file__).resolve().parents[1] / "examples" / "templates"
PARAMS = {"customer_name": "Ann", "order_id": 1, "total": 19.99, "currency": "EUR",
          "items": [{"name": "Coffee beans", "quantity": 1, "price": 19.99}]}


def rate(url: str, settings: EnqueueSettings, count: int, tag: str, single: bool) -> float:
    """Messages per second: one enqueue_many of ``count``, or ``count`` enqueue calls
    (each looks the template up again), in one transaction."""
    engine = db.make_engine(url)
    batch = [Message(to=f"u{i}@example.com", template="order_confirmation", params=PARAMS,
                     key=f"{tag}-{i}") for i in range(count)]
    started = time.perf_counter()
    with engine.begin() as conn:
        if single:
            for m in batch:
                enqueue(conn, to=m.to, template=m.template, params=m.params, key=m.key,
                        settings=settings)
        else:
            enqueue_many(conn, batch, settings=settings)
    seconds = time.perf_counter() - started
    engine.dispose()
    return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        migrate.upgrade(db.make_engine(url))
        kinds = {"unchecked": EnqueueSettings(message_id_domain="shop.example.com"),
                 "checked": EnqueueSettings(templates_dir=TEMPLATES,
                                            message_id_domain="shop.example.com")}
        for single in (False, True):
            rates: dict[str, list[float]] = {k: [] for k in kinds}
            for r in range(args.rounds):
                for kind, settings in kinds.items():
                    rates[kind].append(rate(url, settings, args.messages,
                                            f"{kind}-{single}-{r}", single))
            unchecked, checked = (statistics.median(rates[k])
                                  for k in ("unchecked", "checked"))
            how = "enqueue() calls" if single else "messages in one enqueue_many"
            print(f"{args.messages} {how}, median of {args.rounds} rounds:")
            print(f"  without a templates folder: {unchecked:8.0f} messages/s")
            print(f"  checked against it:         {checked:8.0f} messages/s  "
                  f"(ratio {checked / unchecked:.2f})")


if __name__ == "__main__":
    main()
