"""A FastAPI shop on SQLAlchemy 2 ORM with an AsyncSession: the order and its
confirmation mail are written in one transaction.

Run it::

    pip install 'mailout' fastapi uvicorn asyncpg greenlet   # SQLAlchemy's asyncio needs greenlet
    export DATABASE_URL=postgresql+asyncpg://app@localhost/shop
    MAILOUT_DATABASE_URL=$DATABASE_URL mailout db upgrade   # mailout's tables
    uvicorn examples.fastapi_orders.app:app
    mailout dev-sink --port 2525 &                           # a local SMTP sink (.eml files)
    MAILOUT_DATABASE_URL=$DATABASE_URL MAILOUT_TEMPLATES=examples/templates \\
        MAIL_FROM=shop@example.com SMTP_HOST=127.0.0.1 SMTP_PORT=2525 SMTP_TLS=none \\
        mailout worker                                       # the same URL works

Without ``SMTP_*`` the worker sends to ``localhost:587`` with STARTTLS, and with no
server there it reports an outage and keeps the mail pending.

``POST /orders {"email": ..., "items": [...]}`` creates the order and enqueues
``order_confirmation`` under the key ``order-<id>-confirmation``: commit means both
exist, and any error (a bad address included) means neither does.
"""

# No `from __future__ import annotations`: FastAPI reads the route's annotations at
# run time, and the session dependency is local to create_app.
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import Numeric, String
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import mailout

DEFAULT_URL = "sqlite+aiosqlite:///shop.db"


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320))
    total: Mapped[Decimal] = mapped_column(Numeric(10, 2))


class Item(BaseModel):
    name: str
    quantity: int
    price: Decimal


class OrderIn(BaseModel):
    email: str
    name: str
    items: list[Item]


def create_app(database_url: str | None = None) -> FastAPI:
    """The app on ``database_url`` (default ``DATABASE_URL``, else ``shop.db``)."""
    engine = create_async_engine(database_url or os.environ.get("DATABASE_URL", DEFAULT_URL))
    sessions = async_sessionmaker(engine, expire_on_commit=False)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)  # the shop's own table
        yield
        await engine.dispose()

    async def session() -> AsyncIterator[AsyncSession]:
        async with sessions() as s:
            yield s

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def create_order(body: OrderIn,
                           db: Annotated[AsyncSession, Depends(session)]) -> dict[str, int]:
        total = sum((i.price * i.quantity for i in body.items), Decimal(0))
        try:
            async with db.begin():  # one transaction: the order and its mail
                order = Order(email=body.email, total=total)
                db.add(order)
                await db.flush()  # the order's id, for the key
                await mailout.enqueue_async(
                    db, to=body.email, template="order_confirmation",
                    key=f"order-{order.id}-confirmation",
                    params={"order_id": order.id, "customer_name": body.name,
                            "items": [{"name": i.name, "quantity": i.quantity,
                                       "price": float(i.price)} for i in body.items],
                            "total": float(total), "currency": "EUR"})
        except mailout.InvalidMessage as exc:  # rolled back: no order, no mail
            raise HTTPException(422, f"{exc.field}: {exc.reason}") from None
        return {"id": order.id}

    return app


app = create_app()
