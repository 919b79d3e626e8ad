"""``webhooks config plan|apply|export`` (#32): a file's tables planned against the database (one
line per name, secrets as fingerprints), applied in one transaction audited as ``cli:<login>``,
the deployment's own items never touched, and an export that ``apply`` takes back whole."""

from __future__ import annotations

import base64
import getpass
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy.orm import Session

from tests.admin.test_runtime_config import api
from tests.conftest import base_config, make_app
from tests.support.templates import migrated
from webhooks.configuration.keys import Keyring
from webhooks.store.configuration import items as store

KEYS = "k1:" + base64.b64encode(b"1" * 32).decode()
KEYRING = Keyring([("k1", b"1" * 32)])
SHOP_SECRET = "whsec_" + base64.b64encode(b"shop-secret-bytes-0024").decode()
NEW_SECRET = "whsec_" + base64.b64encode(b"shop-secret-bytes-0025").decode()
DEST_SECRET = "whsec_" + base64.b64encode(b"destination-secret-bytes-24").decode()
URL_TOKEN = "tok_QueryStringTokenNeverShown_91"
MAILGUN_KEY = "mailgun-api-key-never-shown-7"
FILE = """
[destinations.orders]
url = "env:ORDERS_URL"
secrets = ["env:ORDERS_SECRET"]

[endpoints.shop-eu]
provider = "stripe"
label = "merchant-7"
secrets = ["env:SHOP_SECRET"]
forward = ["orders"]
"""


def environment(url: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "WEBHOOKS_ENCRYPTION_KEYS": KEYS,
        "WEBHOOKS_CONFIG": "",
        "REDIS_URL": "",
        "ORDERS_URL": f"https://hooks.example.com/in?token={URL_TOKEN}",
        "ORDERS_SECRET": DEST_SECRET,
        "SHOP_SECRET": SHOP_SECRET,
        **extra,
    }


def cli(env: dict[str, str], *args: str) -> Result:
    from webhooks.service.cli import main

    return CliRunner().invoke(main, ["config", *args], env=env)


def written(tmp_path: Path, text: str, name: str = "items.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def session(url: str) -> Session:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    return Session(engine)


def listing(url: str) -> list[tuple[Any, ...]]:
    """Each item as the API would list it: name, kind, label, provider, options, fingerprints."""
    with session(url) as s:
        sealed = store.secrets_of(s)
        return [
            (i.name, i.kind, i.label, i.provider, i.options, sorted(x.fingerprint for x in sealed.get(i.name, [])))
            for i in store.items(s)
        ]


def audit(url: str) -> list[tuple[str, str, str]]:
    with session(url) as s:
        return [(c.who, c.action, c.target) for c in reversed(store.changes(s))]


@pytest.fixture
def url(sqlite_url: str) -> str:
    migrated(sqlite_url)
    return sqlite_url


def plan_apply_plan(url: str, tmp_path: Path) -> None:
    env, path = environment(url), written(tmp_path, FILE)
    planned = cli(env, "plan", path)
    assert planned.exit_code == 0, planned.output
    shop, dest = KEYRING.fingerprint(SHOP_SECRET.encode()), KEYRING.fingerprint(DEST_SECRET.encode())
    url_fp = KEYRING.fingerprint(f"https://hooks.example.com/in?token={URL_TOKEN}".encode())
    assert planned.output.splitlines() == [
        f"create destination orders (secret +{dest}, url +{url_fp})",
        f"create endpoint shop-eu (secret +{shop})",
    ]
    assert listing(url) == []  # a plan changes nothing
    applied = cli(env, "apply", path)
    assert applied.exit_code == 0, applied.output
    for value in (SHOP_SECRET, DEST_SECRET, URL_TOKEN):
        assert value not in planned.output + applied.output
    who = f"cli:{getpass.getuser()}"
    assert audit(url) == [(who, "create", "destination orders"), (who, "create", "endpoint shop-eu")]
    assert [(n, k, label) for n, k, label, *_ in listing(url)] == [
        ("orders", "destination", None),
        ("shop-eu", "endpoint", "merchant-7"),
    ]
    assert cli(env, "plan", path).output == "no changes\n"


def test_plan_shows_fingerprints_apply_makes_it_audited_then_no_changes(url: str, tmp_path: Path) -> None:
    plan_apply_plan(url, tmp_path)


@pytest.mark.slow
def test_plan_and_apply_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    migrated(pg_url)
    plan_apply_plan(pg_url, tmp_path)


def test_an_update_names_the_keys_and_swaps_the_secret(url: str, tmp_path: Path) -> None:
    env = environment(url)
    assert cli(env, "apply", written(tmp_path, FILE)).exit_code == 0
    changed = FILE.replace('label = "merchant-7"', 'label = "merchant-8"\ntolerance_seconds = 60')
    path = written(tmp_path, changed.replace("env:SHOP_SECRET", "env:NEW_SECRET"), "changed.toml")
    env["NEW_SECRET"] = NEW_SECRET
    old, new = KEYRING.fingerprint(SHOP_SECRET.encode()), KEYRING.fingerprint(NEW_SECRET.encode())
    planned = cli(env, "plan", path)
    assert (
        planned.output == f"update endpoint shop-eu: tolerance_seconds, secrets, label (secret +{new}, secret -{old})\n"
    )
    assert cli(env, "apply", path).exit_code == 0
    with session(url) as s:
        snap = store.snapshot(s, KEYRING, now=datetime.now(UTC))
    table = next(i.table for i in snap.items if i.name == "shop-eu")
    assert table["secrets"] == [NEW_SECRET] and table["tolerance_seconds"] == 60
    assert cli(env, "plan", path).output == "no changes\n"
    assert [a for _, a, t in audit(url) if t == "endpoint shop-eu"] == [
        "create",
        "update",
        "add_secret",
        "expire_secret",
    ]


def test_prune_deletes_what_the_file_does_not_name_and_only_with_prune(url: str, tmp_path: Path) -> None:
    env = environment(url)
    assert cli(env, "apply", written(tmp_path, FILE)).exit_code == 0
    only = written(tmp_path, FILE.split("[endpoints.shop-eu]")[0], "only.toml")
    assert cli(env, "plan", only).output == "no changes\n"
    assert cli(env, "plan", only, "--prune").output == "delete endpoint shop-eu\n"
    assert cli(env, "apply", only, "--prune").exit_code == 0
    assert [n for n, *_ in listing(url)] == ["orders"]


def test_the_deployments_own_items_are_an_error_naming_them(url: str, tmp_path: Path) -> None:
    env = environment(url, STRIPE_WEBHOOK_SECRET="whsec_test_secret")  # the deployment's endpoint "stripe"
    path = written(tmp_path, FILE + '\n[endpoints.stripe]\nsecrets = ["whsec_other"]\n')
    result = cli(env, "apply", path, "--prune")
    assert result.exit_code == 1 and "'stripe'" in result.output and "deployment's own" in result.output
    assert listing(url) == []
    # --prune leaves them alone: they are not the database's
    assert cli(env, "plan", written(tmp_path, "", "empty.toml"), "--prune").output == "no changes\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[endpoints.shop]\nprovider = "stripe"\nsecrets = ["x"]\ncolour = 1\n', "unknown key 'colour'"),
        ('[endpoints.shop]\nprovider = "stripe"\nsecrets = ["env:NOT_SET_ANYWHERE"]\n', "NOT_SET_ANYWHERE is not set"),
        ('[endpoints.shop]\nprovider = "stripe"\nsecrets = ["x"]\nforward = ["nowhere"]\n', "'nowhere'"),
        ("[sinks.x]\n", "unknown table 'sinks'"),
    ],
)
def test_the_files_own_validation(url: str, tmp_path: Path, text: str, expected: str) -> None:
    result = cli(environment(url), "plan", written(tmp_path, text))
    assert result.exit_code == 1 and expected in result.output and len(result.output.splitlines()) == 1


def test_export_round_trip(sqlite_url: str, tmp_path: Path) -> None:
    app = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))
    client = app.test_client()
    dest = {"name": "orders", "url": f"https://hooks.example.com/in?token={URL_TOKEN}", "secrets": [DEST_SECRET]}
    assert api(client, "POST", "/destinations", dest).status_code == 201
    shop = {"name": "shop.eu", "provider": "stripe", "secrets": [SHOP_SECRET], "forward": ["orders"], "label": "m-7"}
    assert api(client, "POST", "/endpoints", shop).status_code == 201
    assert api(client, "POST", "/endpoints/shop.eu/secrets", {"value": NEW_SECRET}).status_code == 201
    mail = {"name": "mail", "provider": "mailgun", "secrets": ["mg-signing-key-1"], "api_key": MAILGUN_KEY}
    assert api(client, "POST", "/endpoints", {**mail, "domain": "mg.example.com"}).status_code == 201
    exported = cli(environment(sqlite_url), "export")
    assert exported.exit_code == 0, exported.output
    values = [SHOP_SECRET, NEW_SECRET, DEST_SECRET, URL_TOKEN, MAILGUN_KEY, "mg-signing-key-1"]
    assert not [v for v in values if v in exported.output]
    by_fingerprint = {KEYRING.fingerprint(v.encode()): v for v in [*values, dest["url"]]}
    placeholders = dict(re.findall(r"^# (WEBHOOKS_SECRET_\w+): \S+ (fp_\S+)$", exported.output, re.M))
    assert set(placeholders) >= {"WEBHOOKS_SECRET_SHOP_EU_1", "WEBHOOKS_SECRET_SHOP_EU_2", "WEBHOOKS_SECRET_MAIL_2"}
    env = environment(sqlite_url) | {name: by_fingerprint[fp] for name, fp in placeholders.items()}
    path = written(tmp_path, exported.output)
    assert cli(env, "plan", path, "--prune").output == "no changes\n"
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    migrated(fresh)
    applied = cli(env | {"DATABASE_URL": fresh}, "apply", path)
    assert applied.exit_code == 0, applied.output
    assert listing(fresh) == listing(sqlite_url)


def test_export_refuses_two_names_that_make_one_placeholder(url: str) -> None:
    now = datetime.now(UTC)
    with session(url) as s:
        for name in ("shop-eu", "shop.eu"):
            table = {"provider": "stripe", "secrets": [SHOP_SECRET]}
            store.create(s, KEYRING, "endpoint", name, table, label=None, who="t", now=now)
    result = cli(environment(url), "export")
    assert result.exit_code == 1 and "'shop-eu' and 'shop.eu'" in result.output
