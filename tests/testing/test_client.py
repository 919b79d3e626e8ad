"""``webhooks.testing`` in this suite (the plugin is installed with the package): every kind signed
and verified through the real receiver, outcomes and effects, payloads by name, and fixture names
that never shadow a project's own."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import ROOT
from tests.support.catalogue import SENT
from tests.testing.handlers import effects, metadata
from webhooks import providers
from webhooks.testing import WebhookClient, payload, payload_names
from webhooks.testing import plugin as testing_plugin


@pytest.fixture
def webhooks_handlers() -> str:
    return "tests.testing.handlers"


def batch_size(kind: str) -> int:
    """How many events the payload ``SENT[kind]`` holds (a batch kind's body carries several)."""
    body = json.loads(payload(SENT[kind])) if SENT[kind].endswith(".json") else None
    if kind == "sendgrid":
        return len(body)
    if kind == "gocardless":
        return len(body["events"])
    return 2 if kind == "adyen" else 1


def test_every_kind_is_signed_verified_and_handled(webhook_client: WebhookClient) -> None:
    assert set(webhook_client.runtime.settings.endpoints) == set(providers.PROVIDERS) == set(SENT)
    metadata.create_all(webhook_client.engine)
    for kind, name in SENT.items():
        answer = webhook_client.send(kind, name)
        assert answer.status_code == 200, (kind, answer.get_data(as_text=True))
    outcomes = webhook_client.run()
    for kind in SENT:
        mine = [o for o in outcomes if o.endpoint == kind]
        assert len(mine) == batch_size(kind), (kind, mine)
        assert all(o.status == "processed" and o.handlers == ("tests.testing.handlers.record",) for o in mine), mine
    written = webhook_client.session.execute(sa.select(effects.c.endpoint, effects.c.event_id)).all()
    assert sorted(written) == sorted((o.endpoint, o.event_id) for o in outcomes)
    assert webhook_client.run() == []  # each outcome is reported once


def test_the_receivers_signature_check_runs(webhook_client: WebhookClient) -> None:
    """The client signs; it never turns verification off: a body changed after signing is refused
    with the receiver's own reason and nothing is stored."""
    _, body, headers = webhook_client.sign("stripe", payload("stripe/payment_intent.succeeded__basic.json"))
    answer = webhook_client.http.post("/webhooks/stripe", data=body.replace(b"2000", b"2001"), headers=headers)
    assert (answer.status_code, answer.get_json()["error"]) == (400, "signature_mismatch"), answer.get_json()
    assert webhook_client.run() == [] and webhook_client.outcomes() == []


def test_a_handler_that_raises_fails_the_event_with_its_error_and_writes_nothing(
    webhook_client: WebhookClient,
) -> None:
    metadata.create_all(webhook_client.engine)
    event = json.loads(payload("stripe/payment_intent.succeeded__basic.json"))
    event.update(id="evt_fails", type="invoice.payment_failed")
    assert webhook_client.send("stripe", event).status_code == 200
    [outcome] = webhook_client.run()
    assert (outcome.event_id, outcome.status) == ("evt_fails", "failed")
    assert outcome.error is not None and "cannot handle evt_fails" in outcome.error
    assert outcome.traceback is not None and "RuntimeError" in outcome.traceback
    assert webhook_client.session.scalars(sa.select(effects.c.event_id)).all() == []


def test_a_duplicate_is_stored_once_and_handled_once(webhook_client: WebhookClient) -> None:
    metadata.create_all(webhook_client.engine)
    for _ in range(2):
        assert webhook_client.send("github", "issues__opened").status_code == 200
    [outcome] = webhook_client.run()
    assert outcome.status == "processed"
    assert webhook_client.send("github", "github/issues__opened.json").status_code == 200
    assert webhook_client.run() == []
    assert len(webhook_client.session.scalars(sa.select(effects.c.event_id)).all()) == 1


class TestAProjectsOwnEndpoints:
    """A project overrides ``webhooks_endpoints`` (any name, its own secret) and ``webhooks_settings``."""

    @pytest.fixture
    def webhooks_endpoints(self) -> dict[str, Any]:
        return {"shop": {"provider": "shopify", "secrets": ["my-own-secret"], "topic": "orders/paid"}}

    @pytest.fixture
    def webhooks_settings(self) -> dict[str, Any]:
        return {"WEBHOOKS_MAX_BODY_BYTES": "4096"}

    def test_its_endpoint_signs_with_its_secret(self, webhook_client: WebhookClient) -> None:
        assert set(webhook_client.runtime.settings.endpoints) == {"shop"}
        assert webhook_client.runtime.settings.max_body_bytes == 4096
        metadata.create_all(webhook_client.engine)
        assert webhook_client.send("shop", "orders_paid__basic").status_code == 200
        [outcome] = webhook_client.run()
        assert (outcome.endpoint, outcome.status) == ("shop", "processed")
        with pytest.raises(LookupError, match="no endpoint 'stripe' \\(configured: shop\\)"):
            webhook_client.send("stripe", "payment_intent.succeeded__basic")


def test_payloads_by_name(tmp_path: Path) -> None:
    names = payload_names()
    on_disk = sorted(f"{p.parent.name}/{p.name}" for p in (ROOT / "tests" / "payloads").glob("*/*"))
    assert names == on_disk and len(names) > 70
    assert payload("payment_intent.succeeded__basic", "stripe") == payload(
        "stripe/payment_intent.succeeded__basic.json"
    )
    with pytest.raises(LookupError, match="there are: stripe/"):
        payload("payment_intent.nope", "stripe")
    for escape in ("../conftest.py", "stripe/../../conftest.py", "../../pyproject.toml"):
        with pytest.raises(LookupError):
            payload(escape)


def test_the_plugins_fixtures_never_shadow_the_suites() -> None:
    """Every fixture the plugin declares starts with ``webhook`` and none is a name this project's
    conftest files (or any test module) define."""
    declared = {
        node.name
        for node in ast.walk(ast.parse(Path(testing_plugin.__file__).read_text()))
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    }
    assert declared >= {"webhook_client", "webhooks_app", "webhooks_handlers", "webhooks_endpoints"}
    assert all(name.lstrip("_").startswith("webhook") for name in declared), declared
    ours: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        if path.parent.name == "testing":
            continue  # these tests override the plugin's on purpose
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
                ours.add(node.name)
    assert not declared & ours
