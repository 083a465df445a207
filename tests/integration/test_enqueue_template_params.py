"""Enqueue refuses params that do not cover the chosen template variant, on SQLite and
PostgreSQL, writing nothing (issue 16 item 7, issue 14 item 13)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from mailout.db.schema import messages
from mailout.exceptions import InvalidMessage
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_many


@pytest.fixture
def settings(tmp_path: Path) -> EnqueueSettings:
    root = tmp_path / "templates"
    for name, text in {
        "welcome/subject.txt": "Welcome {{ name }}",
        "welcome/text.txt": "{% include 'footer.txt' %}",
        "welcome/es/subject.txt": "Bienvenida {{ nombre }}",
        "welcome/es/text.txt": "Hola",
        "footer.txt": "{{ unsubscribe_url }}",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return EnqueueSettings(templates_dir=root, message_id_domain="example.com")


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(messages)).scalar_one())


def test_a_param_missing_from_the_variant_is_refused_and_nothing_written(
    engine: Engine, settings: EnqueueSettings,
) -> None:
    with pytest.raises(InvalidMessage, match="'unsubscribe_url'") as caught, \
            engine.begin() as conn:
        enqueue(conn, to="ann@example.com", template="welcome", params={"name": "Ann"},
                settings=settings)
    assert caught.value.field == "params"
    # The Spanish variant needs "nombre", and nothing of the default one's.
    with pytest.raises(InvalidMessage, match="'nombre'"), engine.begin() as conn:
        enqueue(conn, to="ana@example.com", template="welcome", locale="es-MX",
                params={"name": "Ana", "unsubscribe_url": "https://x.example/u"},
                settings=settings)
    assert _count(engine) == 0
    with engine.begin() as conn:
        enqueue(conn, to="ana@example.com", template="welcome", locale="es-MX",
                params={"nombre": "Ana"}, settings=settings)
        enqueue(conn, to="ann@example.com", template="welcome",
                params={"name": "Ann", "unsubscribe_url": "https://x.example/u"},
                settings=settings)
    assert _count(engine) == 2


def test_enqueue_many_checks_every_message(engine: Engine, settings: EnqueueSettings) -> None:
    good = Message(to="a@example.com", template="welcome",
                   params={"name": "A", "unsubscribe_url": "u"})
    bad = Message(to="b@example.com", template="welcome", params={"name": "B"})
    with pytest.raises(InvalidMessage, match="'unsubscribe_url'"), engine.begin() as conn:
        enqueue_many(conn, [good, bad], settings=settings)
    assert _count(engine) == 0
