"""Targets: a destination on a loopback, private, link-local or metadata address is refused at
start-up, naming it; a name that resolves to loopback is refused when connecting (unless
``allow_private``); a redirect is not followed. Nothing here connects anywhere but 127.0.0.1."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests.conftest import STRIPE_SECRET, drain, rows, stripe_event, wait_until
from tests.forward.conftest import Script, forwarding, forwarding_app, post, serving, wait_settled
from tests.support import destination
from webhooks.configuration import settings as config
from webhooks.errors import ConfigError
from webhooks.forward.signing import message_id

pytestmark = pytest.mark.slow
NAME = "loopback.test"


def load(url: str, **extra: Any) -> config.Settings:
    dest = {"url": url, "secrets": [destination.SECRET], **extra}
    return config.load(
        {
            "DESTINATIONS": {"target": dest},
            "ENDPOINTS": {"stripe": {"provider": "stripe", "secrets": [STRIPE_SECRET], "forward": ["target"]}},
        }
    )


@pytest.mark.parametrize(
    ("url", "extra"),
    [
        ("http://127.0.0.1:9/", {}),
        ("http://10.0.0.1/", {}),
        ("http://169.254.169.254/", {}),
        ("http://169.254.169.254/", {"allow_private": True}),
        ("http://localhost:9/", {}),
    ],
)
def test_a_private_target_stops_start_up_naming_the_destination(url: str, extra: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="destination 'target'"):
        load(url, **extra)


def test_a_private_target_is_allowed_when_said_so() -> None:
    assert load("http://127.0.0.1:9/", allow_private=True).destinations["target"].allow_private


@pytest.fixture
def unresolvable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``loopback.test`` does not resolve at start-up, without asking any DNS server."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == NAME:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def to_loopback(host: str, port: int) -> list[str]:
    """The forwarder's resolver: the test name resolves to loopback when connecting."""
    assert host == NAME, host
    return ["127.0.0.1"]


def test_a_name_resolving_to_loopback_is_refused_when_connecting(
    request: pytest.FixtureRequest, unresolvable: None
) -> None:
    script = Script()
    with serving(script) as service:
        port = service.url.split(":")[2].split("/")[0]
        url = f"http://{NAME}:{port}/hooks"
        dests = {
            "strict": {"url": url, "secrets": [destination.SECRET], "retry_schedule": [60]},
            "open": {"url": url, "secrets": [destination.SECRET], "retry_schedule": [60], "allow_private": True},
        }
        app = forwarding_app(request, "sqlite", dests, ["strict", "open"])  # allowed at start-up
        post(app, stripe_event("evt_lo"))
        drain(app)
        with forwarding(app, resolver=to_loopback):
            wait_until(lambda: rows(app, "SELECT count(*) FROM delivery_attempts")[0][0] == 2)
        assert [s.id for s in service.seen] == [message_id("stripe", "evt_lo", "open")]
        found = rows(app, "SELECT destination, outcome, status_code, error FROM delivery_attempts ORDER BY destination")
        (o_dest, o_outcome, _, _), (s_dest, s_outcome, s_code, s_error) = found
        assert (o_dest, o_outcome) == ("open", "delivered")
        assert (s_dest, s_outcome, s_code) == ("strict", "error", None) and s_error.startswith("refused")


def test_a_redirect_to_loopback_is_not_followed(request: pytest.FixtureRequest) -> None:
    with serving(Script()) as other:
        moved = Script(plan=lambda n: (302, {"Location": other.url}, b""))
        with serving(moved) as service:
            dests = {"d": destination.config(service, retry_schedule=[0.1])}
            app = forwarding_app(request, "sqlite", dests, ["d"])
            post(app, stripe_event("evt_moved"))
            drain(app)
            with forwarding(app):
                wait_settled(app, 1)
        assert other.seen == [] and len(service.seen) == 2
        attempts = rows(app, "SELECT outcome, status_code FROM delivery_attempts ORDER BY id")
        assert [tuple(r) for r in attempts] == [("error", 302), ("error", 302)]  # an error, retried
        assert rows(app, "SELECT status FROM deliveries")[0][0] == "failed"
