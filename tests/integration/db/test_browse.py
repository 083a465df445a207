"""Keyset-paginated browsing, search, bulk selection and recent activity, on SQLite
and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, Float, bindparam, insert, update

from mailout.db import browse, series
from mailout.db.browse import MessageFilter
from mailout.db.schema import attempts, db_now, db_now_plus, messages
from mailout.models import Status
from mailout.outbox import EnqueueSettings, enqueue

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")


def fill(engine: Engine, n: int, *, queue: str = "default", status: Status = Status.PENDING,
         template: str | None = None, prefix: str = "k") -> list[int]:
    ids = []
    with engine.begin() as conn:
        for i in range(n):
            content = ({"template": template, "params": {"i": i}} if template
                       else {"subject": f"s{i}", "text": "body"})
            ids.append(enqueue(conn, to=f"{prefix}{i}@example.com", key=f"{prefix}-{i}",
                               queue=queue, settings=SETTINGS, **content).id)  # type: ignore[arg-type]
        if status is not Status.PENDING:
            conn.execute(update(messages).where(messages.c.id.in_(ids)).values(status=status.value))
    return ids


def walk(engine: Engine, flt: MessageFilter, limit: int) -> list[list[int]]:
    """Every page from newest to oldest, following the older cursors."""
    pages: list[list[int]] = []
    before = None
    with engine.connect() as conn:
        while True:
            page = browse.browse(conn, flt, before=before, limit=limit)
            pages.append([r.id for r in page.rows])
            if page.older is None:
                return pages
            before = page.older


def test_pages_cover_every_matching_row_once_newest_first(engine: Engine) -> None:
    failed = fill(engine, 7, status=Status.FAILED, prefix="f")
    fill(engine, 5, prefix="p")
    more_failed = fill(engine, 4, status=Status.FAILED, prefix="g")
    pages = walk(engine, MessageFilter(statuses=("failed",)), limit=3)
    assert [len(p) for p in pages] == [3, 3, 3, 2]
    flat = [i for p in pages for i in p]
    assert flat == sorted(failed + more_failed, reverse=True)


def test_newer_cursor_walks_back_to_the_first_page(engine: Engine) -> None:
    fill(engine, 10)
    flt = MessageFilter()
    with engine.connect() as conn:
        first = browse.browse(conn, flt, limit=4)
        second = browse.browse(conn, flt, before=first.older, limit=4)
        back = browse.browse(conn, flt, after=second.newer, limit=4)
        last = browse.browse(conn, flt, before=second.older, limit=4)
    assert first.newer is None
    assert [r.id for r in back.rows] == [r.id for r in first.rows]
    assert back.newer is None
    assert len(last.rows) == 2
    assert last.older is None
    with pytest.raises(ValueError, match="not both"), engine.connect() as conn:
        browse.browse(conn, flt, before=5, after=1)


def test_filters_combine(engine: Engine) -> None:
    fill(engine, 3, queue="bulk", prefix="b")
    fill(engine, 2, queue="critical", template="reset", prefix="c")
    fill(engine, 2, queue="critical", status=Status.DEAD, prefix="d")
    with engine.connect() as conn:
        crit = browse.browse(conn, MessageFilter(queue="critical")).rows
        reset = browse.browse(conn, MessageFilter(queue="critical", template="reset")).rows
        dead = browse.browse(conn, MessageFilter(statuses=("dead", "failed"),
                                                 queue="critical")).rows
        future = browse.browse(conn, MessageFilter(
            created_from=datetime.now(UTC) + timedelta(hours=1))).rows
        recent = browse.browse(conn, MessageFilter(
            created_from=datetime.now(UTC) - timedelta(hours=1),
            created_to=datetime.now(UTC) + timedelta(hours=1))).rows
        queues = browse.distinct_values(conn, "queue")
        templates = browse.distinct_values(conn, "template")
    assert len(crit) == 4
    assert {r.template for r in reset} == {"reset"}
    assert len(reset) == 2
    assert {r.status for r in dead} == {"dead"}
    assert future == []
    assert len(recent) == 7
    assert queues == ["bulk", "critical"]
    assert templates == ["reset"]


def test_search_matches_id_key_message_id_provider_id_and_recipient(engine: Engine) -> None:
    ids = fill(engine, 5)
    with engine.begin() as conn:
        conn.execute(update(messages).where(messages.c.id == ids[3])
                     .values(provider_message_id="PROV-77"))
        row = browse.browse(conn, MessageFilter(search=str(ids[1]))).rows
        mid = row[0].message_id

        def found(term: str) -> list[int]:
            return [r.id for r in browse.browse(conn, MessageFilter(search=term)).rows]

        assert found(str(ids[1])) == [ids[1]]
        assert found("k-2") == [ids[2]]
        assert found(mid) == [ids[1]]
        assert found(mid.strip("<>")) == [ids[1]]
        assert found("PROV-77") == [ids[3]]
        assert found("k4@example.com") == [ids[4]]
        assert found("K4@EXAMPLE.COM") == [ids[4]]
        assert found("nobody@example.com") == []
        assert found("k-2") == found(" k-2 ")


def test_bulk_selection_respects_status_filter_and_upper_bound(engine: Engine) -> None:
    dead = fill(engine, 4, status=Status.DEAD, prefix="d")
    fill(engine, 3, prefix="p")
    with engine.connect() as conn:
        upto = browse.newest_id(conn)
    late = fill(engine, 2, status=Status.DEAD, prefix="late")
    retryable = {Status.DEAD, Status.FAILED}
    with engine.connect() as conn:
        chosen = browse.matching_ids(conn, MessageFilter(), retryable, upto=upto, limit=100)
        capped = browse.matching_ids(conn, MessageFilter(), retryable, upto=upto, limit=2)
        n = browse.count_matching(conn, MessageFilter(), retryable, upto=upto, cap=3)
        pending_only = browse.matching_ids(conn, MessageFilter(statuses=("pending",)),
                                           retryable, upto=upto + 10, limit=100)
    assert chosen == dead
    assert capped == dead[:2]
    assert n == 3  # counted no further than the cap
    assert pending_only == []  # the filter's statuses and the action's must both allow
    assert not set(late) & set(chosen)


def test_renderable_returns_content_for_rendering(engine: Engine) -> None:
    with engine.begin() as conn:
        rid = enqueue(conn, to="a@example.com", template="welcome", params={"name": "Ann"},
                      key="r-1", settings=SETTINGS).id
        msg = browse.renderable(conn, rid)
        assert browse.renderable(conn, rid + 100) is None
    assert msg is not None
    assert msg.params == {"name": "Ann"}
    assert msg.template == "welcome"
    assert msg.key == "r-1"


def test_activity_counts_outcomes_per_bucket(engine: Engine) -> None:
    (rid,) = fill(engine, 1)
    with engine.begin() as conn:
        def log(outcome: str, minutes_ago: float, **kw: object) -> None:
            at = db_now_plus(bindparam("ago", -minutes_ago * 60, Float))
            conn.execute(insert(attempts).values(
                outbox_id=rid, attempt=1, outcome=outcome, started_at=at, finished_at=at,
                **kw))

        for ago in (1, 2, 3):
            log("sent", ago)
        log("retry", 7)
        log("failed", 52)
        log("dead", 90)  # outside the hour, inside the day
        hour = series.activity(conn, ["sent", "retry", "failed", "dead"],
                               span=timedelta(hours=1), buckets=12)
        day = series.activity(conn, ["sent", "dead"], span=timedelta(days=1), buckets=24)
        now = conn.execute(db_now().select()).scalar_one()
    assert hour.counts["sent"][-1] == 3  # the newest 5-minute bucket
    assert hour.counts["retry"][-2] == 1
    assert hour.counts["failed"][1] == 1  # 52 minutes ago: the second bucket (8-10 min in)
    assert hour.total("dead") == 0
    assert day.total("dead") == 1
    assert day.total("sent") == 3
    assert now is not None
