"""A tiny shop: an order and its confirmation email commit together, or not at all.

The outbox pattern in one file. ``place_order`` inserts a row into the shop's own
``orders`` table and enqueues the confirmation *in the same transaction*: if the
order is rolled back, no email exists; if it commits, the email will be sent,
even if the process dies right after the commit.

Run it from the repository root (it creates ``example-shop.db`` by default)::

    python examples/order_app.py
    python examples/order_app.py --db postgresql+psycopg://user:pass@localhost/shop

Then send what it queued to the local development sink (``mailout dev-sink``)::

    mailout dev-sink --background
    MAIL_FROM="Shop <shop@example.com>" SMTP_HOST=127.0.0.1 SMTP_PORT=2525 SMTP_TLS=none \\
    MAILOUT_TEMPLATES=examples/templates mailout --db sqlite:///example-shop.db worker --until-idle
    kill "$(cat sink-mail/dev-sink.pid)"

It uses only the public API: ``mailout.enqueue``, ``mailout.EnqueueSettings``,
``mailout.upgrade_database`` and ``mailout.count_messages``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, create_engine, insert

import mailout

TEMPLATES = Path(__file__).resolve().parent / "templates"
SETTINGS = mailout.EnqueueSettings(templates_dir=TEMPLATES,
                                   message_id_domain="shop.example.com")

metadata = MetaData()
orders = Table(
    "orders", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("customer", String(100), nullable=False),
    Column("email", String(320), nullable=False),
    Column("total_cents", Integer, nullable=False),
)


class OutOfStock(Exception):
    """A business rule failing after the email was already enqueued."""


def place_order(engine: Engine, customer: str, email: str, items: list[dict[str, Any]],
                *, in_stock: bool = True) -> int:
    """Insert the order and enqueue its confirmation in one transaction; return its id."""
    total = sum(item["price"] * item["quantity"] for item in items)
    with engine.begin() as conn:
        order_id = conn.execute(
            insert(orders).values(customer=customer, email=email,
                                  total_cents=round(total * 100)).returning(orders.c.id)
        ).scalar_one()
        result = mailout.enqueue(
            conn,
            to=email,
            template="order_confirmation",
            # The key names the business event: a retried request cannot send it twice.
            key=f"order-{order_id}-confirmation",
            params={"customer_name": customer, "order_id": order_id, "items": items,
                    "total": total, "currency": "EUR"},
            settings=SETTINGS,
        )
        if not in_stock:
            raise OutOfStock(f"order {order_id}")  # rolls back the order AND the email
    print(f"order {order_id} placed; confirmation queued as {result.message_id} "
          f"(key {result.key})")
    return int(order_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite:///example-shop.db", help="database URL")
    args = parser.parse_args()
    engine = create_engine(args.db)  # the application's own engine
    mailout.upgrade_database(engine)  # mailout's tables; in a real app, with your migrations
    metadata.create_all(engine)
    place_order(engine, "Alice", "alice@example.com",
                [{"name": "Espresso beans, 1 kg", "quantity": 1, "price": 29.90}])
    try:
        place_order(engine, "Bob", "bob@example.com",
                    [{"name": "Golden kettle", "quantity": 1, "price": 999.00}], in_stock=False)
    except OutOfStock as exc:
        print(f"{exc} failed (out of stock): rolled back, no order and no email")
    with engine.connect() as conn:
        counts = mailout.count_messages(conn)
    print(f"outbox: {counts['pending']} pending, {counts['sent']} sent")
    engine.dispose()


if __name__ == "__main__":
    main()
