"""The package's public names resolve, lazily."""

from __future__ import annotations

import mailout


def test_every_public_name_resolves() -> None:
    for name in mailout.__all__:
        assert getattr(mailout, name) is not None


def test_errors_share_one_root_and_their_builtin() -> None:
    assert issubclass(mailout.InvalidMessage, mailout.MailoutError)
    assert issubclass(mailout.InvalidMessage, ValueError)
    assert issubclass(mailout.NotFound, LookupError)
