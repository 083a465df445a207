"""MAILOUT_PGBOUNCER and MAILOUT_LISTEN_URL: what they accept, refuse, and change."""

from __future__ import annotations

import pytest

from mailout import db
from mailout.db import pooler
from mailout.exceptions import ConfigError, MailoutError

PG = "postgresql+psycopg://app@bouncer.example:6432/shop"


@pytest.mark.parametrize("raw", ["", "session", "SESSION", " off "])
def test_unset_or_session_mode_is_direct(raw: str) -> None:
    assert pooler.pool_mode({"MAILOUT_PGBOUNCER": raw}) is pooler.PoolMode.DIRECT
    assert pooler.pool_mode({}) is pooler.PoolMode.DIRECT


def test_transaction_mode_turns_psycopg_prepared_statements_off() -> None:
    env = {"MAILOUT_PGBOUNCER": "Transaction"}
    assert pooler.pool_mode(env) is pooler.PoolMode.TRANSACTION
    assert pooler.connect_args(PG, env) == {"prepare_threshold": None}


def test_direct_mode_leaves_psycopg_alone() -> None:
    assert pooler.connect_args(PG, {}) == {}


def test_other_databases_get_nothing_even_in_transaction_mode() -> None:
    env = {"MAILOUT_PGBOUNCER": "transaction"}
    assert pooler.connect_args("sqlite:///x.db", env) == {}
    assert pooler.connect_args("mysql+pymysql://root@db/x", env) == {}


def test_statement_mode_is_refused_saying_why() -> None:
    with pytest.raises(ConfigError) as caught:
        pooler.pool_mode({"MAILOUT_PGBOUNCER": "statement"})
    assert caught.value.setting == "MAILOUT_PGBOUNCER"
    assert "statement mode cannot run" in caught.value.reason
    assert isinstance(caught.value, MailoutError)
    assert isinstance(caught.value, ValueError)


def test_an_unknown_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="expected transaction or session, got 'yes'"):
        pooler.pool_mode({"MAILOUT_PGBOUNCER": "yes"})


def test_callers_connect_args_are_kept_and_win() -> None:
    env = {"MAILOUT_PGBOUNCER": "transaction"}
    kw = pooler.engine_kwargs(PG, {"pool_size": 2, "connect_args": {"application_name": "a",
                                                                    "prepare_threshold": 9}},
                              env)
    assert kw == {"pool_size": 2, "connect_args": {"application_name": "a",
                                                   "prepare_threshold": 9}}
    assert pooler.engine_kwargs(PG, {"pool_size": 2}, env) == {
        "pool_size": 2, "connect_args": {"prepare_threshold": None}}


def test_make_engine_refuses_statement_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILOUT_PGBOUNCER", "statement")
    with pytest.raises(ConfigError, match="MAILOUT_PGBOUNCER"):
        db.make_engine(PG)


def test_listen_url_is_the_database_url_when_direct() -> None:
    assert pooler.listen_url(PG, {}) == PG


def test_listen_url_is_none_behind_pgbouncer_without_its_own_setting() -> None:
    assert pooler.listen_url(PG, {"MAILOUT_PGBOUNCER": "transaction"}) is None


def test_listen_url_setting_wins_in_either_mode() -> None:
    direct = "postgresql://app@db.example:5432/shop"
    for mode in ("", "transaction"):
        env = {"MAILOUT_PGBOUNCER": mode, "MAILOUT_LISTEN_URL": direct}
        assert pooler.listen_url(PG, env) == direct


def test_listen_url_must_be_postgresql() -> None:
    with pytest.raises(ConfigError, match="MAILOUT_LISTEN_URL"):
        pooler.listen_url(PG, {"MAILOUT_LISTEN_URL": "mysql://root@db/x"})
