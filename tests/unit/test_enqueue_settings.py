"""EnqueueSettings.from_env: the size, recipient and age limits read like every other
setting (envparse's rules), and a bad value names its setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailout import outbox
from mailout.exceptions import ConfigError
from mailout.outbox import DEFAULT_MAX_RECIPIENTS, EnqueueSettings


def test_limits_are_read_with_their_types_and_defaults() -> None:
    settings = EnqueueSettings.from_env({"MAILOUT_MAX_RECIPIENTS": "7",
                                         "MAILOUT_MAX_AGE_SECONDS": "2.5",
                                         "MAILOUT_MAX_MESSAGE_BYTES": ""})
    assert (settings.max_recipients, settings.max_age_seconds) == (7, 2.5)
    assert isinstance(settings.max_recipients, int)
    assert EnqueueSettings.from_env({}).max_recipients == DEFAULT_MAX_RECIPIENTS
    assert settings.max_message_bytes == EnqueueSettings.from_env({}).max_message_bytes


@pytest.mark.parametrize(("name", "raw", "words"), [
    ("MAILOUT_MAX_RECIPIENTS", "0", "greater than 0"),
    ("MAILOUT_MAX_RECIPIENTS", "1.5", "whole number"),
    ("MAILOUT_MAX_ATTACHMENT_BYTES", "-1", "greater than 0"),
    ("MAILOUT_MAX_AGE_SECONDS", "soon", "a number"),
])
def test_a_bad_limit_is_a_config_error_naming_the_setting(name: str, raw: str,
                                                          words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        EnqueueSettings.from_env({name: raw})
    assert name in str(caught.value)
    assert words in str(caught.value)


class _Recording(dict[str, str]):
    """An environment that remembers every name asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return super().__getitem__(key)


def test_the_remembered_parse_watches_every_variable_from_env_reads() -> None:
    env = _Recording()
    EnqueueSettings.from_env(env)
    assert env.asked <= set(outbox.ENV_NAMES), "add the new setting to ENV_NAMES"


def test_enqueue_without_settings_sees_a_changed_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in outbox.ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    first = outbox._settings_from_env()
    assert outbox._settings_from_env() is first  # parsed once
    assert first.templates_dir == Path("templates")
    for name, raw, attribute, value in [
        ("MAILOUT_TEMPLATES_CHECK", "off", "templates_dir", None),
        ("MAILOUT_MAX_RECIPIENTS", "7", "max_recipients", 7),
        ("MAILOUT_NOTIFY", "0", "notify", outbox.NotifyMode.OFF),
        ("MAILOUT_MESSAGE_ID_DOMAIN", "a.example", "message_id_domain", "a.example"),
    ]:
        monkeypatch.setenv(name, raw)
        assert getattr(outbox._settings_from_env(), attribute) == value
    monkeypatch.setenv("MAILOUT_MAX_RECIPIENTS", "none")
    for _ in range(2):  # a bad value is refused on every call, not remembered
        with pytest.raises(ConfigError):
            outbox._settings_from_env()


@pytest.mark.parametrize(("raw", "mode"), [
    (None, outbox.NotifyMode.AFTER_COMMIT),
    ("", outbox.NotifyMode.AFTER_COMMIT),
    ("after-commit", outbox.NotifyMode.AFTER_COMMIT),
    (" In-Transaction ", outbox.NotifyMode.IN_TRANSACTION),
    ("off", outbox.NotifyMode.OFF),
    # The old on/off spellings: on wakes workers (now after the commit), off does not.
    ("1", outbox.NotifyMode.AFTER_COMMIT),
    ("true", outbox.NotifyMode.AFTER_COMMIT),
    ("0", outbox.NotifyMode.OFF),
    ("no", outbox.NotifyMode.OFF),
])
def test_mailout_notify_values(raw: str | None, mode: outbox.NotifyMode) -> None:
    env = {} if raw is None else {"MAILOUT_NOTIFY": raw}
    assert EnqueueSettings.from_env(env).notify is mode


def test_mailout_notify_refuses_an_unknown_value_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="after-commit, in-transaction or off"):
        EnqueueSettings.from_env({"MAILOUT_NOTIFY": "sometimes"})


def test_a_full_memo_of_environments_drops_the_least_recently_used_not_all(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in outbox.ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    in_use = outbox._settings_from_env()
    for n in range(1, 30):  # more test-like environments than are kept...
        monkeypatch.setenv("MAILOUT_MAX_RECIPIENTS", str(n))
        outbox._settings_from_env()
        monkeypatch.delenv("MAILOUT_MAX_RECIPIENTS")
        assert outbox._settings_from_env() is in_use  # ...while one stays in steady use
