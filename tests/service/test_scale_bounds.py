"""What 10 000 database endpoints (#32) may not make grow: ``/metrics`` labels a database
endpoint's series by its kind (``stripe:*``; the file's endpoints keep their names), and each
endpoint's quarantine share never falls below a useful floor, however many endpoints share it."""

from __future__ import annotations

import base64
from typing import Any

from flask import Flask

from tests.conftest import admin_headers, base_config, make_app, stripe_event, stripe_headers
from webhooks import metrics
from webhooks.configuration.settings import Settings
from webhooks.receiver import quarantine

KEYS = "k1:" + base64.b64encode(b"1" * 32).decode()


def test_a_database_endpoints_series_are_its_kinds_and_the_files_keep_their_names(sqlite_url: str) -> None:
    app: Flask = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))
    client = app.test_client()
    secrets = {f"shop-{i}": f"whsec_TenantSecretNumber{i}" for i in range(3)}
    for name, secret in secrets.items():
        table = {"name": name, "provider": "stripe", "secrets": [secret]}
        assert client.post("/admin/api/endpoints", json=table, headers=admin_headers()).status_code == 201
    rt: Any = app.extensions["webhooks"]
    rt.reload_config()
    assert metrics.endpoint_label(rt, "stripe") == "stripe"  # the file's (base_config's STRIPE_WEBHOOK_SECRET)
    assert {metrics.endpoint_label(rt, n) for n in secrets} == {"stripe:*"}
    assert metrics.endpoint_label(rt, "nobody") == metrics.UNKNOWN
    for i, (name, secret) in enumerate(secrets.items()):
        body = stripe_event(f"evt_scale_{i}")
        assert client.post(f"/webhooks/{name}", data=body, headers=stripe_headers(body, secret)).status_code == 200
    scraped = client.get("/metrics", headers=admin_headers()).get_data(as_text=True)
    assert 'endpoint="stripe:*"' in scraped and not any(f'endpoint="{n}"' in scraped for n in secrets)


def test_each_endpoint_keeps_a_useful_quarantine_share_however_many_share_it() -> None:
    few = Settings(endpoints=dict.fromkeys(("a", "b"), None))  # type: ignore[arg-type]
    assert quarantine.budget(few) == (500, 32 * 1024 * 1024)  # the defaults' totals, halved
    many = Settings(endpoints=dict.fromkeys((f"e{i}" for i in range(10_000)), None))  # type: ignore[arg-type]
    assert quarantine.budget(many) == (quarantine.MIN_SHARE_ROWS, quarantine.MIN_SHARE_BYTES) == (10, 65536)
