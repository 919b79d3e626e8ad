"""``Retry-After`` as RFC 9110 gives it: seconds, or an HTTP date; anything else is no throttle."""

from __future__ import annotations

import email.utils

import pytest

from webhooks.forward.dispatcher import retry_after


def test_seconds_and_dates() -> None:
    now = 1_800_000_000.0
    assert retry_after("120", now) == 120.0
    assert retry_after(" 7 ", now) == 7.0
    assert retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == pytest.approx(30.0)
    assert retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0  # already past: at once


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5", "Wed, 99 Foo 2026 00:00:00 GMT"])
def test_unreadable_values_are_no_throttle(value: str | None) -> None:
    assert retry_after(value, 1_800_000_000.0) is None
