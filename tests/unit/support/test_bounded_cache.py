"""BoundedCache: least recently used out first, bounded by count or by weight."""

from __future__ import annotations

import threading

import pytest

from mailout.support.bounded_cache import BoundedCache


def test_a_full_cache_drops_the_least_recently_used_entry_only() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert "b" not in cache
    assert (cache.get("a"), cache.get("c"), len(cache)) == (1, 3, 2)


def test_putting_a_known_key_replaces_its_value_and_weight() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(10, weigh=len)
    cache.put("a", b"12345")
    cache.put("a", b"12")
    assert (cache.get("a"), cache.weight, len(cache)) == (b"12", 2, 1)


def test_a_weighted_cache_drops_entries_until_the_new_one_fits() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(10, weigh=len)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    cache.put("c", b"123456")
    assert ("a" in cache, "b" in cache, "c" in cache) == (False, True, True)
    assert cache.weight == 10


def test_a_value_heavier_than_the_limit_is_refused_and_nothing_dropped() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(4, weigh=len)
    cache.put("a", b"12")
    assert cache.put("big", b"12345") is False
    assert ("big" in cache, cache.get("a"), cache.weight) == (False, b"12", 2)


def test_a_miss_is_none_and_clear_empties_it() -> None:
    cache: BoundedCache[str, int] = BoundedCache(3)
    assert cache.get("x") is None
    cache.put("x", 1)
    cache.clear()
    assert (len(cache), cache.weight, cache.get("x")) == (0, 0, None)


def test_a_limit_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BoundedCache(0)


def test_the_snapshot_is_a_copy() -> None:
    cache: BoundedCache[str, int] = BoundedCache(3)
    cache.put("a", 1)
    copy = cache.snapshot()
    cache.put("b", 2)
    assert copy == {"a": 1}


def test_threads_reading_and_writing_keep_the_weight_exact() -> None:
    cache: BoundedCache[int, bytes] = BoundedCache(1000, weigh=len)

    def churn(offset: int) -> None:
        for i in range(5000):
            cache.put((i + offset) % 300, b"x" * (i % 7 + 1))
            cache.get((i * 7 + offset) % 300)
            cache.snapshot() if i % 500 == 0 else None

    threads = [threading.Thread(target=churn, args=(n * 37,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = cache.snapshot()
    assert cache.weight == sum(len(v) for v in held.values()) <= 1000
