"""``webhooks send`` for an endpoint created at runtime (the seams issue, finding 8): it signs with
the stored secret when the command can open it (the database and its key reachable, as for
``serve``), or with ``--secret``; without the key its error says how."""

from __future__ import annotations

from pathlib import Path

import pytest
import stripe
from click.testing import CliRunner

from tests.admin.test_runtime_config import KEYS, SECRET, SHOP, api
from tests.conftest import base_config, make_app
from tests.support import destination
from webhooks.service.cli import main

PAYLOAD = b'{"id": "evt_sent_1", "object": "event", "type": "charge.succeeded", "data": {"object": {}}}'


@pytest.fixture
def stored(tmp_path: Path) -> str:
    """A SQLite database holding endpoint ``shop-eu`` with its secret sealed under ``KEYS``."""
    url = f"sqlite:///{tmp_path / 'webhooks.db'}"
    app = make_app(base_config(url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))
    assert api(app.test_client(), "POST", "/endpoints", SHOP).status_code == 201
    app.extensions["webhooks"].engine.dispose()
    return url


def send(tmp_path: Path, url: str, target: str, *extra: str, keys: str = KEYS) -> tuple[int, str]:
    payload = tmp_path / "event.json"
    payload.write_bytes(PAYLOAD)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    env = {"DATABASE_URL": url, "WEBHOOKS_CONFIG": str(empty), "WEBHOOKS_ENCRYPTION_KEYS": keys}
    result = CliRunner().invoke(main, ["send", "shop-eu", str(payload), "--url", target, *extra], env=env)
    return result.exit_code, result.output


def test_send_signs_with_a_stored_endpoints_secret(tmp_path: Path, stored: str) -> None:
    with destination.running() as dest:
        code, output = send(tmp_path, stored, dest.url)
        assert code == 0, output
        [seen] = dest.seen
    assert seen.body == PAYLOAD
    stripe.WebhookSignature.verify_header(seen.body.decode(), seen.headers["stripe-signature"], SECRET, 300)


def test_send_without_the_key_says_how_and_with_secret_signs(tmp_path: Path, stored: str) -> None:
    with destination.running() as dest:
        code, output = send(tmp_path, stored, dest.url, keys="")
        assert code == 1 and "WEBHOOKS_ENCRYPTION_KEYS" in output and "--secret" in output, output
        assert dest.seen == []
        code, output = send(tmp_path, stored, dest.url, "--secret", SECRET, keys="")
        assert code == 0, output
        [seen] = dest.seen
    stripe.WebhookSignature.verify_header(seen.body.decode(), seen.headers["stripe-signature"], SECRET, 300)
