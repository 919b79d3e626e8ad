"""Where runtime configuration meets the other features (the seams issue #37): a worker whose
snapshot does not know an event's endpoint reads the database before processing it; no time value
an operator types can freeze configuration; a secret's expiry binds every process at its time;
admin input is bounded before it is stored."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from tests.admin.test_runtime_config import DEST_SECRET, OTHER, SECRET, SHOP, api, config, deliver, rt
from tests.conftest import at_once, drain, make_app, rows, stripe_event, stripe_headers


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_worker_that_has_not_seen_an_endpoint_reads_it_before_processing(
    db: str, request: pytest.FixtureRequest
) -> None:
    """Finding 1's second half: the worker's snapshot predates the endpoint (its watcher has not
    seen the change yet); its first event must still be forwarded, never ``processed`` bare."""
    web = make_app(config(request, db))
    worker = make_app(config(request, db))
    assert rt(worker).watcher is not None
    rt(worker).watcher.stop.set()  # this process has not seen what follows
    rt(worker).watcher.thread.join(10)
    client = web.test_client()
    dest = {"name": "orders", "url": "http://127.0.0.1:9/hooks", "allow_private": True, "secrets": [DEST_SECRET]}
    assert api(client, "POST", "/destinations", dest).status_code == 201
    assert api(client, "POST", "/endpoints", {**SHOP, "forward": ["orders"]}).status_code == 201
    assert "shop-eu" not in rt(worker).settings.endpoints
    assert deliver(web, "shop-eu", "evt_first", SECRET) == 200
    if db == "sqlite":  # each test app has an embedded queue of its own: the job reaches the worker's
        rt(worker).queue.requeue("shop-eu", "evt_first", force=True)
    drain(worker)
    assert rows(worker, "SELECT status FROM events WHERE event_id = 'evt_first'")[0][0] == "processed"
    assert rows(worker, "SELECT destination FROM deliveries WHERE event_id = 'evt_first'") == [("orders",)]


def listed(client: Any, name: str) -> dict[str, Any]:
    answer = api(client, "GET", "/endpoints")
    assert answer.status_code == 200, answer.get_json()
    [found] = [e for e in answer.get_json()["endpoints"] if e["name"] == name]
    return dict(found)


OUT_OF_RANGE = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "0001-01-01T13:59:59+14:00"]
EDGES = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"]


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_no_time_value_can_freeze_the_configuration(db: str, request: pytest.FixtureRequest) -> None:
    """Finding 2: a time before year 1 or past 9999 once its offset is applied is 400 naming the
    field and stores nothing; both valid edges are stored, read back, and every process keeps
    reading the configuration (a new endpoint still appears, the list and writes still answer)."""
    app = make_app(config(request, db))
    other = make_app(config(request, db))  # another process: it must keep following the database
    client = app.test_client()
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    secret_id = listed(client, "shop-eu")["secrets"][0]["id"]
    before = rows(app, "SELECT count(*) FROM config_secrets")[0][0]
    for bad in OUT_OF_RANGE:
        for field in ("expires_at", "not_before"):
            answer = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": "whsec_" + "b" * 32, field: bad})
            assert answer.status_code == 400, (field, bad, answer.get_json())
            assert answer.get_json()["error"] == "invalid_config" and answer.get_json()["field"] == field
        answer = api(client, "POST", f"/endpoints/shop-eu/secrets/{secret_id}/expire", {"at": bad})
        assert answer.status_code == 400 and answer.get_json()["field"] == "at"
    assert rows(app, "SELECT count(*) FROM config_secrets")[0][0] == before  # nothing stored
    assert rows(app, "SELECT count(*) FROM config_secrets WHERE expires_at IS NOT NULL")[0][0] == 0
    # The valid edges: stored, read back, and every process reads the configuration after them.
    far = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": "whsec_" + "e" * 32, "expires_at": EDGES[1]})
    assert far.status_code == 201, far.get_json()
    early = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": "whsec_" + "n" * 32, "not_before": EDGES[0]})
    assert early.status_code == 201, early.get_json()
    shown = {s["id"]: s for s in listed(client, "shop-eu")["secrets"]}
    assert shown[far.get_json()["id"]]["expires_at"].startswith("9999-12-31T23:59:59")
    assert shown[early.get_json()["id"]]["not_before"].startswith("0001-01-01T00:00:00")
    assert api(client, "POST", "/endpoints", {**SHOP, "name": "shop-us"}).status_code == 201
    for runtime_of in (app, other):
        rt(runtime_of).reload_config()
        assert {"shop-eu", "shop-us"} <= set(rt(runtime_of).settings.endpoints)
    assert api(client, "GET", "/endpoints").status_code == 200
    assert deliver(other, "shop-us", "evt_after_edges", SECRET) == 200
    expired = api(client, "POST", f"/endpoints/shop-eu/secrets/{far.get_json()['id']}/expire", {"at": EDGES[1]})
    assert expired.status_code == 200, expired.get_json()


# A value each database stores and its driver cannot read back: PostgreSQL takes a time whose
# offset puts it before year 1 in UTC (the finding 2, written straight to the table);
# SQLite takes any text in a time column.
UNREADABLE = {"postgres": "0001-01-01 00:00:00+14", "sqlite": "the day after never"}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_row_no_driver_can_read_is_refused_alone(db: str, request: pytest.FixtureRequest) -> None:
    """Finding 2's other half: whatever wrote it, one stored row the driver cannot read is a bad
    row: that item alone is left as it was (a running process keeps it, a restarted one leaves it
    out, the error logged), every other change applies, and the listing and writes keep answering."""
    app = make_app(config(request, db))
    client = app.test_client()
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    assert api(client, "POST", "/endpoints", {**SHOP, "name": "shop-bad", "label": None}).status_code == 201
    with rt(app).engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE config_secrets SET expires_at = :t WHERE item_name = 'shop-bad'"), {"t": UNREADABLE[db]}
        )
        conn.execute(sa.text("UPDATE config_version SET version = version + 1"))
    assert api(client, "POST", "/endpoints", {**SHOP, "name": "shop-us"}).status_code == 201  # writes answer
    rt(app).reload_config()
    assert {"shop-eu", "shop-us", "shop-bad"} <= set(rt(app).settings.endpoints)  # shop-bad as it was
    restarted = make_app(config(request, db))
    assert {"shop-eu", "shop-us"} <= set(rt(restarted).settings.endpoints)
    assert "shop-bad" not in rt(restarted).settings.endpoints
    listing = api(client, "GET", "/endpoints")
    assert listing.status_code == 200 and {"shop-eu", "shop-us"} <= {e["name"] for e in listing.get_json()["endpoints"]}
    assert deliver(restarted, "shop-us", "evt_beside_a_bad_row", SECRET) == 200
    assert api(client, "DELETE", "/endpoints/shop-bad").status_code in (200, 204)  # the repair: delete and create
    rt(restarted).reload_config()
    assert "shop-bad" not in rt(restarted).settings.endpoints and "shop-eu" in rt(restarted).settings.endpoints


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_the_last_live_secrets_expiry_binds_every_process(db: str, request: pytest.FixtureRequest) -> None:
    """Finding 3: S2 added with ``expires_at`` a few seconds ahead, S1 expired (allowed: S2 is
    live). Once S2 lapses, the running process and a restarted one refuse its deliveries with
    ``no_live_secret`` (a reason on the rejections page), never verifying with the lapsed secret."""
    import time
    from datetime import UTC, datetime, timedelta

    from tests.conftest import wait_until

    app = make_app(config(request, db))
    client = app.test_client()
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    first = listed(client, "shop-eu")["secrets"][0]["id"]
    lapse = datetime.now(UTC) + timedelta(seconds=4)
    second = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": OTHER, "expires_at": lapse.isoformat()})
    assert second.status_code == 201, second.get_json()
    assert api(client, "POST", f"/endpoints/shop-eu/secrets/{first}/expire", {}).status_code == 200
    rt(app).reload_config()
    assert deliver(app, "shop-eu", "evt_before_lapse", OTHER) == 200 or time.time() >= lapse.timestamp()
    wait_until(lambda: time.time() > lapse.timestamp() + 0.1, timeout=30)
    restarted = make_app(config(request, db))
    for process in (app, restarted):  # no reload needed: the window closes at its time
        body = stripe_event("evt_after_lapse")
        answer = process.test_client().post("/webhooks/shop-eu", data=body, headers=stripe_headers(body, OTHER))
        assert answer.status_code == 400 and answer.get_json()["error"] == "no_live_secret", answer.get_json()
        old = process.test_client().post("/webhooks/shop-eu", data=body, headers=stripe_headers(body, SECRET))
        assert old.get_json()["error"] == "no_live_secret"
    assert rows(app, "SELECT count(*) FROM events WHERE event_id = 'evt_after_lapse'")[0][0] == 0
    reasons = {r[0] for r in rows(app, "SELECT reason FROM rejection_counts WHERE endpoint = 'shop-eu'")}
    assert "no_live_secret" in reasons
    shown = listed(client, "shop-eu")
    assert shown["live_secrets"] == 0


def test_admin_input_is_bounded_before_it_is_stored(request: pytest.FixtureRequest) -> None:
    """Finding 7's admin input: JSON nested past the bound (or past the parser's stack) is 400
    ``invalid_config``, never a 500; PATCH keeps POST's label rule; a create carrying more secrets
    than may be live at once is 409 ``too_many_secrets``; nothing of any of them is stored."""
    app = make_app(config(request, "sqlite"))
    client = app.test_client()
    for depth in (17, 100_000):
        nested = "[" * depth + "]" * depth
        body = '{"name": "deep", "provider": "stripe", "secrets": ["' + SECRET + '"], "x": ' + nested + "}"
        answer = client.post("/admin/api/endpoints", data=body, content_type="application/json", headers=admin())
        assert answer.status_code == 400 and answer.get_json()["error"] == "invalid_config", depth
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    patch = '{"label": ' + "[" * 100_000 + "]" * 100_000 + "}"
    answer = client.patch("/admin/api/endpoints/shop-eu", data=patch, content_type="application/json", headers=admin())
    assert answer.status_code == 400 and answer.get_json()["error"] == "invalid_config"
    long = api(client, "PATCH", "/endpoints/shop-eu", {"label": "x" * 300_000})
    assert long.status_code == 400 and long.get_json()["field"] == "label"
    assert listed(client, "shop-eu")["label"] == SHOP["label"]
    six = {**SHOP, "name": "six", "secrets": [f"whsec_{n}" + "s" * 30 for n in range(6)]}
    refused = api(client, "POST", "/endpoints", six)
    assert (refused.status_code, refused.get_json()["error"]) == (409, "too_many_secrets")
    assert "six" not in {e["name"] for e in api(client, "GET", "/endpoints").get_json()["endpoints"]}
    assert "deep" not in {e["name"] for e in api(client, "GET", "/endpoints").get_json()["endpoints"]}


def admin() -> dict[str, str]:
    from tests.conftest import admin_headers

    return admin_headers()


def test_file_endpoints_are_listed_with_their_options_and_secrets(request: pytest.FixtureRequest) -> None:
    """Finding 8: a file endpoint was listed with ``"options": {}`` and ``"secrets": []``; it is
    listed with its options (credentials excepted) and one secret object per secret, ``id`` null,
    with a fingerprint when an encryption key is configured (null otherwise)."""
    from tests.conftest import STRIPE_SECRET, base_config

    for keys, fingerprinted in ((True, True), (False, False)):
        settings = config(request, "sqlite") if keys else base_config(request.getfixturevalue("sqlite_url"))
        settings["ENDPOINTS"]["stripe"] = {"provider": "stripe", "secrets": [STRIPE_SECRET], "tolerance_seconds": 240}
        app = make_app(settings)
        shown = listed(app.test_client(), "stripe")
        assert shown["source"] == "file"
        assert shown["options"]["tolerance_seconds"] == 240
        assert STRIPE_SECRET not in str(shown)
        [secret] = shown["secrets"]
        assert secret["id"] is None and secret["purpose"] == "signing"
        assert (secret["fingerprint"] or "").startswith("fp_k1_") == fingerprinted
        assert (secret["fingerprint"] is None) == (not fingerprinted)
        assert shown["live_secrets"] == 1
        assert shown["variables"] == []


def test_an_endpoint_made_by_a_shorthand_variable_says_so(request: pytest.FixtureRequest) -> None:
    """Finding 8: an endpoint from ``GITHUB_WEBHOOK_SECRET`` alone was labelled "configuration file"."""
    from tests.conftest import admin_headers

    app = make_app(config(request, "sqlite", GITHUB_WEBHOOK_SECRET="gh-shorthand-secret"))
    client = app.test_client()
    made = listed(client, "github")
    assert (made["source"], made["variables"]) == ("file", ["GITHUB_WEBHOOK_SECRET"])
    assert listed(client, "stripe")["variables"] == []  # the file's (the test mapping's ENDPOINTS)
    page = client.get("/admin/endpoints", headers=admin_headers()).get_data(as_text=True)
    assert "environment: GITHUB_WEBHOOK_SECRET" in page and "gh-shorthand-secret" not in page


CREDENTIALED = {  # a table of each kind whose api_base receives a stored credential
    "stripe": {"provider": "stripe", "secrets": [SECRET], "api_key": "sk_test_pinned_credential_1"},
    "paypal": {"provider": "paypal", "webhook_id": "WH-1", "client_id": "id-1", "client_secret": "cs-1"},
    "mailgun": {"provider": "mailgun", "secrets": ["key-mg-signing"], "api_key": "key-1", "domain": "mg.example"},
}
ELSEWHERE = ["http://169.254.169.254", "https://attacker.example", "https://api.stripe.com.attacker.example"]


@pytest.mark.parametrize("kind", sorted(CREDENTIALED))
def test_a_stored_credential_goes_only_where_its_kind_sends_it(kind: str, request: pytest.FixtureRequest) -> None:
    """Finding 5: ``api_base`` of stripe, paypal and mailgun took any host, so a read-write token
    (or an edit of the clear options in the database) sent the sealed credential anywhere. Each
    passes the rule Mollie's had: the kind's documented hosts over HTTPS; this machine only from
    the file (the tests' fake APIs). The API answers 400 naming ``api_base``; a row edited in the
    database to another host is refused by every process, which keeps the last valid options."""
    app = make_app(config(request, "sqlite"))
    client = app.test_client()
    table = {"name": "creds", **CREDENTIALED[kind]}
    for base in [*ELSEWHERE, "http://127.0.0.1:9"]:
        answer = api(client, "POST", "/endpoints", {**table, "api_base": base})
        assert answer.status_code == 400 and answer.get_json()["field"] == "api_base", (base, answer.get_json())
    official = {"stripe": "https://api.stripe.com", "paypal": "https://api-m.paypal.com"}.get(
        kind, "https://api.eu.mailgun.net"
    )
    created = api(client, "POST", "/endpoints", {**table, "api_base": official})
    assert created.status_code == 201, created.get_json()
    for base in ELSEWHERE:
        answer = api(client, "PATCH", "/endpoints/creds", {"api_base": base})
        assert answer.status_code == 400 and answer.get_json()["field"] == "api_base", base
    # An edit of the clear options in the database, with no key at all:
    import json

    with rt(app).engine.begin() as conn:
        options = json.loads(conn.exec_driver_sql("SELECT options FROM config_items WHERE name = 'creds'").scalar())
        options["api_base"] = "https://attacker.example"
        conn.exec_driver_sql(
            "UPDATE config_items SET options = ?, updated_at = CURRENT_TIMESTAMP", (json.dumps(options),)
        )
        conn.exec_driver_sql("UPDATE config_version SET version = version + 1")
    rt(app).reload_config()
    assert rt(app).settings.endpoints["creds"].options["api_base"] == official  # the last valid stays
    restarted = make_app(config(request, "sqlite"))
    assert "creds" not in rt(restarted).settings.endpoints  # refused: never built with that host


def test_the_files_api_base_is_pinned_too() -> None:
    from webhooks.configuration import settings as webhooks_config
    from webhooks.errors import ConfigError

    for table in CREDENTIALED.values():
        with pytest.raises(ConfigError, match="api_base must be https://"):
            webhooks_config.load({"ENDPOINTS": {"x": {**table, "api_base": "http://169.254.169.254"}}})
        assert webhooks_config.load({"ENDPOINTS": {"x": {**table, "api_base": "http://127.0.0.1:8999"}}})


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_admin_writes_are_serial_and_validated_against_the_database(db: str, request: pytest.FixtureRequest) -> None:
    """Finding 6, on two processes (two runtimes on one database): a PATCH adding ``forward = ["d"]``
    racing the DELETE of ``d`` never both succeed; two PATCHes of different keys both land; a
    destination created on one process is named at once by a PATCH on the other."""
    one, two = make_app(config(request, db)), make_app(config(request, db))
    a, b = one.test_client(), two.test_client()
    assert api(a, "POST", "/endpoints", SHOP).status_code == 201
    dest = {"url": "http://127.0.0.1:9/hooks", "allow_private": True, "secrets": [DEST_SECRET]}
    for n in range(8):
        name = f"d{n}"
        assert api(a, "POST", "/destinations", {**dest, "name": name}).status_code == 201
        patched, deleted = at_once(
            lambda name=name: api(b, "PATCH", "/endpoints/shop-eu", {"forward": [name]}),
            lambda name=name: api(a, "DELETE", f"/destinations/{name}"),
        )
        codes = (patched.status_code, deleted.status_code)
        assert codes in ((200, 409), (400, 204)), (n, codes, patched.get_json())
        forward = listed(a, "shop-eu")["forward"]
        exists = name in {d["name"] for d in api(a, "GET", "/destinations").get_json()["destinations"]}
        assert (name in forward) == exists, (n, forward, exists)  # never an endpoint naming a deleted one
        if exists:
            assert api(a, "PATCH", "/endpoints/shop-eu", {"forward": []}).status_code == 200
            assert api(a, "DELETE", f"/destinations/{name}").status_code == 204
    for n in range(40):
        first, second = at_once(
            lambda n=n: api(a, "PATCH", "/endpoints/shop-eu", {"label": f"round-{n}"}),
            lambda n=n: api(b, "PATCH", "/endpoints/shop-eu", {"tolerance_seconds": 100 + n}),
        )
        assert (first.status_code, second.status_code) == (200, 200)
        shown = listed(a, "shop-eu")
        assert (shown["label"], shown["options"]["tolerance_seconds"]) == (f"round-{n}", 100 + n), n
    for n in range(6):  # created on one process, named at once on the other
        assert api(a, "POST", "/destinations", {**dest, "name": f"new{n}"}).status_code == 201
        answer = api(b, "PATCH", "/endpoints/shop-eu", {"forward": [f"new{n}"]})
        assert answer.status_code == 200, answer.get_json()


def test_stored_secrets_are_bounded_and_the_audit_holds_what_changed(request: pytest.FixtureRequest) -> None:
    """Finding 7: already-expired secrets were unbounded and every audit row copied every secret
    (150 of them made one endpoint's audit 3.4 MB). At most ``MAX_STORED`` signing secrets are kept
    (the longest-expired go first); each audit row holds the secrets its change touched."""
    import json

    from webhooks.store.configuration.items import MAX_STORED

    app = make_app(config(request, "sqlite"))
    client = app.test_client()
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    for n in range(MAX_STORED + 10):
        added = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": f"whsec_round_{n}_" + "x" * 24})
        assert added.status_code == 201, (n, added.get_json())
        older = [s for s in listed(client, "shop-eu")["secrets"] if s["id"] != added.get_json()["id"]]
        for secret in older:
            if secret["expires_at"] is None:
                assert api(client, "POST", f"/endpoints/shop-eu/secrets/{secret['id']}/expire", {}).status_code == 200
    kept = listed(client, "shop-eu")["secrets"]
    assert len(kept) <= MAX_STORED and listed(client, "shop-eu")["live_secrets"] == 1
    for change in api(client, "GET", "/audit?limit=100").get_json()["changes"]:
        if change["action"] in ("add_secret", "expire_secret"):
            touched = len((change["before"] or {}).get("secrets", [])) + len(change["after"].get("secrets", []))
            assert touched <= 2, change
            assert len(json.dumps(change)) < 4000
