"""What an enqueue adds to a business transaction, on PostgreSQL.

Each transaction inserts one business row (an order); half of them also enqueue
the order's confirmation e-mail. The two kinds alternate in blocks so that drift
in the machine's speed hits both alike. Prints per-transaction times and the ratio.

    .venv/bin/python bench/enqueue_cost.py [--transactions 4000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, insert

from bench.common import scratch_database
from mailout import db
from mailout.db import migrate
from mailout.enqueue import EnqueueSettings, enqueue

meta = MetaData()
orders = Table("orders", meta, Column("id", BigInteger, primary_key=True),
               Column("customer", String(100)), Column("total_cents", Integer))
SETTINGS = EnqueueSettings(message_id_domain="shop.example.com")


def run(url: str, total: int, block: int, warmup: int = 200) -> tuple[list[float], list[float]]:
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    meta.create_all(engine)
    plain: list[float] = []
    with_mail: list[float] = []
    n = 0
    for b in range(-2, total // block):
        mail = b % 2 == 1
        size = warmup // 2 if b < 0 else block  # the first two blocks only warm up
        for _ in range(size):
            n += 1
            t0 = time.perf_counter()
            with engine.begin() as conn:
                conn.execute(insert(orders).values(id=n, customer=f"c{n}", total_cents=n))
                if mail:
                    enqueue(conn, to=f"customer{n}@example.com", template="order_confirmation",
                            params={"order_id": n, "total": "12.34", "items": ["a", "b"]},
                            key=f"order-{n}-confirmation", settings=SETTINGS)
            if b >= 0:
                (with_mail if mail else plain).append(time.perf_counter() - t0)
    engine.dispose()
    return plain, with_mail


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transactions", type=int, default=4000)
    ap.add_argument("--block", type=int, default=200)
    args = ap.parse_args()
    with scratch_database() as url:
        plain, with_mail = run(url, args.transactions, args.block)
    _report(plain, with_mail)


def _report(plain: list[float], with_mail: list[float]) -> None:
    def ms(xs: list[float], q: float) -> float:
        return statistics.quantiles(xs, n=100)[int(q) - 1] * 1000

    print(f"{'transaction':<28}{'n':>6}{'mean ms':>10}{'p50 ms':>9}{'p95 ms':>9}")
    for name, xs in (("order only", plain), ("order + enqueue", with_mail)):
        print(f"{name:<28}{len(xs):>6}{statistics.fmean(xs) * 1000:>10.3f}"
              f"{ms(xs, 50):>9.3f}{ms(xs, 95):>9.3f}")
    mean_ratio = statistics.fmean(with_mail) / statistics.fmean(plain)
    median_ratio = statistics.median(with_mail) / statistics.median(plain)
    print(f"enqueue adds {100 * (mean_ratio - 1):.1f}% (mean), "
          f"{100 * (median_ratio - 1):.1f}% (median); target <= 15%")


if __name__ == "__main__":
    main()
