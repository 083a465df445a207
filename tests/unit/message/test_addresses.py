"""addresses.address's fast path must answer exactly as email-validator does."""

from __future__ import annotations

import pytest
from email_validator import EmailNotValidError, validate_email
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mailout.exceptions import InvalidMessage
from mailout.message import addresses

# Characters that decide the fast path's shape checks, plus some it must refuse.
LOCAL_CHARS = "aZ09._-+!#$%&'*/=?^`{|}~\"(),:;<>@[\\] é"
DOMAIN_CHARS = "aZ09.-_é"
LABELS = ["example", "EXAMPLE", "com", "co", "uk", "xn--bcher-kva", "test", "local",
          "localhost", "invalid", "onion", "arpa", "123", "a-", "-a", "a--b", "x" * 63,
          "x" * 64, ""]


def reference(addr: str) -> str | None:
    """email-validator's answer as address() must give it: normalised with the domain
    in ASCII (as sent without SMTPUTF8), or refused, as is a non-ASCII local part."""
    try:
        checked = validate_email(addr, check_deliverability=False)
    except EmailNotValidError:
        return None
    return checked.ascii_email if checked.local_part.isascii() else None


def ours(addr: str) -> str | None:
    try:
        return addresses.address("to", addr)
    except InvalidMessage:
        return None


domains = st.one_of(
    st.text(DOMAIN_CHARS, min_size=0, max_size=20),
    st.lists(st.sampled_from(LABELS), min_size=1, max_size=5).map(".".join),
)
locals_ = st.one_of(
    st.text(LOCAL_CHARS, min_size=0, max_size=20),
    st.sampled_from(["Postmaster", "ABUSE", "info", "x" * 64, "x" * 65, "a.b", ".a", "a..b"]),
)


@settings(max_examples=3000, deadline=None)
@given(local=locals_, domain=domains, padding=st.integers(0, 260))
@example(local="a", domain="example.com", padding=0)
@example(local="a", domain="bücher.example", padding=0)
@example(local="a", domain="xn--bcher-kva.example", padding=0)
@example(local="a", domain="EXAMPLE.COM", padding=0)
@example(local="Postmaster", domain="example.com", padding=0)
@example(local="a", domain="example.com", padding=240)
@example(local="a", domain="a.b.example.test", padding=0)
@pytest.mark.slow
def test_same_answer_as_email_validator(local: str, domain: str, padding: int) -> None:
    # padding pushes some addresses over the 254-octet limit, at the local part.
    addr = f"{local}{'p' * padding if local else ''}@{domain}"
    if "\r" in addr or "\n" in addr or "\x00" in addr:
        return  # refused before email-validator is asked; see text()
    assert ours(addr) == reference(addr)


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        ("Jane.Doe@Example.COM", "Jane.Doe@example.com"),  # local part kept, domain folded
        ("POSTMASTER@example.com", "postmaster@example.com"),  # role names fold (RFC 2142)
        ("a@xn--bcher-kva.example", "a@xn--bcher-kva.example"),  # sent in ASCII (issue 14)
        ("a@bücher.example", "a@xn--bcher-kva.example"),  # converted to ASCII
    ],
)
def test_normalisation(addr: str, expected: str) -> None:
    assert addresses.address("to", addr) == expected


@pytest.mark.parametrize("addr", ["a@localhost", "a@example.invalid", "a@example",
                                  "a..b@example.com", "a@-x.example.com",
                                  "a" * 250 + "@example.com"])
def test_refusals_name_the_field_and_keep_email_validators_reason(addr: str) -> None:
    with pytest.raises(InvalidMessage) as exc:
        addresses.address("to", addr)
    assert exc.value.field == "to"
    assert reference(addr) is None
