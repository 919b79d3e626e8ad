"""Wrong admin passwords are throttled per client: hundreds of guesses from one address get 429 +
``Retry-After`` after the free ones (counted in ``/metrics``), while the right password from any
other address works at once, and the first address logs in again once its wait is over. On the
HTML console and the JSON API, per process (embedded) and service-wide (Redis)."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import admin_headers, base_config, free_port, make_app
from webhooks.admin.throttle import FREE, MAX_CLIENTS, REFILL, LoginThrottle
from webhooks.receiver.clients import client_key

ATTACKER, OPERATOR = "203.0.113.7", "198.51.100.9"
WRONG = {"Authorization": "Basic " + base64.b64encode(b"admin:guess").decode()}
SURFACES = {"api": "/admin/api/events", "pages": "/admin/", "metrics": "/metrics"}


class Clock:
    """The throttle's time, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def throttled_app(config: dict[str, object]) -> tuple[Flask, Clock]:
    app = make_app(config)
    clock = Clock()
    throttle: LoginThrottle = app.extensions["webhooks_login_throttle"]
    throttle.clock = clock
    return app, clock


@pytest.fixture(params=["embedded", "redis"])
def backend(request: pytest.FixtureRequest, sqlite_url: str) -> Callable[..., tuple[Flask, Clock]]:
    """Apps of one deployment: on the embedded default each has its own buckets; on Redis they share them."""
    extra = {"REDIS_URL": request.getfixturevalue("redis_url")} if request.param == "redis" else {}
    return lambda **more: throttled_app(base_config(sqlite_url, **extra, **more))


def get(client: FlaskClient, url: str, address: str, headers: dict[str, str]) -> object:
    return client.get(url, headers=headers, environ_overrides={"REMOTE_ADDR": address})


def counted(client: FlaskClient, outcome: str) -> float:
    text = client.get("/metrics", headers=admin_headers(), environ_overrides={"REMOTE_ADDR": "192.0.2.1"}).get_data(
        as_text=True
    )
    match = re.search(rf'^webhooks_admin_auth_failures_total{{outcome="{outcome}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("surface", SURFACES)
def test_hundreds_of_guesses_are_throttled_for_that_client_only(
    backend: Callable[..., tuple[Flask, Clock]], surface: str
) -> None:
    app, clock = backend()
    client, url = app.test_client(), SURFACES[surface]
    throttled_before = counted(client, "throttled")
    answers = [get(client, url, ATTACKER, WRONG) for _ in range(300)]
    statuses = [a.status_code for a in answers]  # type: ignore[attr-defined]
    assert statuses == [401] * FREE + [429] * (300 - FREE)
    refused = answers[-1]
    assert 0 < int(refused.headers["Retry-After"]) <= REFILL  # type: ignore[attr-defined]
    assert "WWW-Authenticate" not in refused.headers  # type: ignore[attr-defined]
    if surface != "pages":
        assert refused.get_json() == {"error": "login_throttled"}  # type: ignore[attr-defined]
    else:
        assert refused.mimetype == "text/html" and "Too many wrong passwords" in refused.get_data(as_text=True)  # type: ignore[attr-defined]
    assert counted(client, "throttled") - throttled_before == 300 - FREE
    # The throttled client is refused even with the right password, until its wait is over.
    assert get(client, url, ATTACKER, admin_headers()).status_code == 429  # type: ignore[attr-defined]
    # Every other client: the right password works at once, a wrong one is a plain 401.
    assert get(client, url, OPERATOR, admin_headers()).status_code == 200  # type: ignore[attr-defined]
    assert get(client, url, OPERATOR, WRONG).status_code == 401  # type: ignore[attr-defined]
    clock.now += int(refused.headers["Retry-After"])  # type: ignore[attr-defined]
    assert get(client, url, ATTACKER, admin_headers()).status_code == 200  # type: ignore[attr-defined]
    # One more guess is allowed per REFILL seconds, no burst: the next is refused again.
    assert get(client, url, ATTACKER, WRONG).status_code == 401  # type: ignore[attr-defined]
    assert get(client, url, ATTACKER, WRONG).status_code == 429  # type: ignore[attr-defined]
    # Full recovery once the bucket has refilled.
    clock.now += FREE * REFILL
    statuses = [get(client, url, ATTACKER, WRONG).status_code for _ in range(FREE + 1)]  # type: ignore[attr-defined]
    assert statuses == [401] * FREE + [429]


def test_the_budget_is_per_process_embedded_and_service_wide_on_redis(
    backend: Callable[..., tuple[Flask, Clock]], request: pytest.FixtureRequest
) -> None:
    (one, clock_one), (two, clock_two) = backend(), backend()
    clock_two.now = clock_one.now
    for _ in range(FREE):
        assert get(one.test_client(), "/admin/api/events", ATTACKER, WRONG).status_code == 401  # type: ignore[attr-defined]
    shared = "redis" in request.node.callspec.id
    expected = 429 if shared else 401
    assert get(two.test_client(), "/admin/api/events", ATTACKER, WRONG).status_code == expected  # type: ignore[attr-defined]


def test_no_credentials_are_not_a_guess(backend: Callable[..., tuple[Flask, Clock]]) -> None:
    """A browser asks first without credentials: those 401s do not count against it."""
    app, _ = backend()
    client = app.test_client()
    for _ in range(FREE * 3):
        assert get(client, "/admin/", OPERATOR, {}).status_code == 401  # type: ignore[attr-defined]
    assert get(client, "/admin/", OPERATOR, admin_headers()).status_code == 200  # type: ignore[attr-defined]


def test_forwarded_for_is_believed_only_from_trusted_proxies(sqlite_url: str) -> None:
    app, _ = throttled_app(base_config(sqlite_url))
    client = app.test_client()
    # Untrusted: rotating X-Forwarded-For does not escape the throttle of REMOTE_ADDR.
    statuses = [
        get(client, "/admin/api/events", ATTACKER, WRONG | {"X-Forwarded-For": f"10.0.0.{i}"}).status_code  # type: ignore[attr-defined]
        for i in range(FREE + 1)
    ]
    assert statuses[-1] == 429
    # Behind one trusted proxy: the address it appended is the client; the one before it is the client's own claim.
    app, _ = throttled_app(base_config(sqlite_url, WEBHOOKS_TRUSTED_PROXIES="1"))
    client = app.test_client()
    for i in range(FREE + 1):
        headers = WRONG | {"X-Forwarded-For": f"10.0.0.{i}, {ATTACKER}"}
        last = get(client, "/admin/api/events", "127.0.0.1", headers)
    assert last.status_code == 429  # type: ignore[attr-defined]
    ok = get(client, "/admin/api/events", "127.0.0.1", admin_headers() | {"X-Forwarded-For": OPERATOR})
    assert ok.status_code == 200  # type: ignore[attr-defined]


def test_an_ipv6_client_is_counted_by_its_64() -> None:
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:203.0.113.7") == client_key(ATTACKER) == ATTACKER


def test_a_redis_outage_is_never_a_5xx_nor_a_lockout(sqlite_url: str) -> None:
    app, _ = throttled_app(base_config(sqlite_url, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"))
    client = app.test_client()
    statuses = [get(client, "/admin/api/replays", ATTACKER, WRONG).status_code for _ in range(FREE + 5)]  # type: ignore[attr-defined]
    assert statuses == [401] * FREE + [429] * 5  # this process's buckets decide meanwhile
    # The console's own data needs the database only: the operator elsewhere still gets in.
    assert get(client, "/admin/api/replays", OPERATOR, admin_headers()).status_code == 200  # type: ignore[attr-defined]


def test_the_in_process_buckets_stay_bounded() -> None:
    """Guesses from 30 000 addresses: at most MAX_CLIENTS buckets, the newest kept."""
    throttle = LoginThrottle(clock=Clock())
    for i in range(30_000):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(throttle.buckets) <= MAX_CLIENTS
    assert throttle.buckets["10.0.117.47"] == (FREE - 1, Clock().now)  # the last address's one guess
