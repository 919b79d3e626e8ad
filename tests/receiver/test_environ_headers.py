"""``request_headers.environ_headers`` gives what Werkzeug's ``EnvironHeaders`` gives, for any environ."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from werkzeug.datastructures import EnvironHeaders

from webhooks.receiver import request_headers
from webhooks.receiver.request_headers import environ_headers

KEYS = st.one_of(
    st.sampled_from(
        [
            "CONTENT_TYPE",
            "CONTENT_LENGTH",
            "HTTP_CONTENT_TYPE",
            "HTTP_CONTENT_LENGTH",
            "HTTP_STRIPE_SIGNATURE",
            "HTTP_X_GITHUB_DELIVERY",
            "HTTP_",
            "HTTPX",
            "REQUEST_METHOD",
            "wsgi.input",
            "H",
        ]
    ),
    st.text(min_size=1, max_size=12).map(lambda s: "HTTP_" + s),
    st.text(max_size=12),
)


@given(st.dictionaries(KEYS, st.text(max_size=8), max_size=12))
def test_the_same_headers_as_werkzeug(environ: dict[str, Any]) -> None:
    assert environ_headers(environ) == dict(EnvironHeaders(environ).items())
    assert environ_headers(environ) == dict(EnvironHeaders(environ).items())  # and from its remembered names


def test_remembered_names_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(request_headers, "_names", {})
    environ = {f"HTTP_X_{i}": "v" for i in range(request_headers.MAX_NAMES + 50)}
    assert len(environ_headers(environ)) == request_headers.MAX_NAMES + 50
    assert len(request_headers._names) == request_headers.MAX_NAMES
