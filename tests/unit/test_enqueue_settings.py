"""EnqueueSettings.from_env: the size, recipient and age limits read like every other
setting (envparse's rules), and a bad value names its setting."""

from __future__ import annotations

import pytest

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
