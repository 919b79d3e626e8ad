"""A provider kind lives in one module: importing it loads no web stack, and a new kind is one
module plus one registry line (here a throwaway kind registered at runtime)."""

from __future__ import annotations

import hashlib
import hmac
import json
import pkgutil
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest

import webhooks.providers
from tests.conftest import admin_headers, base_config, drain, make_app, rows, runtime
from webhooks.configuration import settings as config
from webhooks.providers import PROVIDERS
from webhooks.store import purge
from webhooks.worker import reconcile

ACME_SECRET = "acme-test-secret"


def test_importing_every_provider_module_loads_no_web_framework_database_or_redis() -> None:
    names = sorted(f"webhooks.providers.{m.name}" for m in pkgutil.iter_modules(webhooks.providers.__path__))
    assert {"webhooks.providers.stripe", "webhooks.providers.adyen", "webhooks.providers.base"} <= set(names)
    script = textwrap.dedent(f"""
        import importlib, json, sys
        for name in {names!r}:
            importlib.import_module(name)
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("flask", "sqlalchemy", "redis"))))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


# The whole kind, as a maintainer would add it: one module (HMAC-SHA256 hex of the body in
# X-Acme-Signature; one delivery carries a batch of items, each an event moving an order).
ACME_MODULE = '''
"""Acme: a throwaway provider kind for the tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhooks.errors import VerificationError
from webhooks.providers.base import (
    DAY, Endpoint, Missed, ObjectRef, Provider, Request, Verified, VerifiedEvent, encode_item, first_match,
    hmac_digest, parse_json, require,
)
from webhooks.providers.fields import minor_amount

REFETCHED: list[str] = []
FOLDED: list[str] = []
LISTED: list[dict[str, Any]] = []  # what "Acme's API" lists for reconciliation


class Acme(Provider):
    kind = "acme"
    retry_horizon = 5 * DAY
    shorthands = {"ACME_SECRET": "secrets", "ACME_API_TOKEN": "api_token"}
    option_names = frozenset({"api_token"})
    signature_header_names = ("x-acme-signature",)
    folds = True  # an order's state is a fold of its events; without order.paid it has a gap
    gap_type = "order"
    reconcile_with = "api_token"

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        raw = require(request, "X-Acme-Signature")
        try:
            given = bytes.fromhex(raw)
        except ValueError:
            raise VerificationError("malformed_signature", "not hex") from None
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), request.body), [given])
        items = parse_json(request.body)["items"]
        events = [VerifiedEvent(i["id"], i["type"], index=n, secret_index=index) for n, i in enumerate(items)]
        return Verified(events, "acme-v1")

    def event_data(self, payload: bytes, index: int | None) -> Any:
        data = parse_json(payload)
        return data if index is None else data["items"][index]

    def batch_item(self, data: Any, index: int) -> Any:
        return data["items"][index]

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        return ObjectRef("order", data["order"], data["seq"], {"event": data["id"], "status": data["type"],
                                                               "seq": data["seq"]})

    def refetch(self, endpoint: Endpoint, event_type: str, data: Any,
                ref: ObjectRef | None) -> tuple[Any, ObjectRef | None]:
        REFETCHED.append(data["id"])
        return data, ref

    def fold(self, stored: Any, incoming: ObjectRef) -> ObjectRef:
        FOLDED.append(incoming.state["event"])
        seen = dict((stored or {}).get("seen", {}))
        seen[incoming.state["event"]] = [incoming.state["seq"], incoming.state["status"]]
        latest = max(seen, key=lambda e: seen[e][0])
        state = {"seen": seen, "status": seen[latest][1], "latest": latest,
                 "gap": all(status != "order.paid" for _, status in seen.values())}
        return ObjectRef(incoming.type, incoming.id, len(seen), state)

    def missed(self, endpoint: Endpoint, since: int, *, undelivered: bool = False) -> Iterator[Missed]:
        for item in LISTED:
            yield Missed(Verified([VerifiedEvent(item["id"], item["type"])], "acme-listed"), encode_item(item))

    def describe_version(self, version: int) -> str | None:
        return f"fold of {version} acme event(s)"

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        item = self.event_data(payload, index)
        return minor_amount(item.get("cents"), item.get("currency"))
'''


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The kind from a module in a temporary package, registered (one line) and removed after."""
    package = tmp_path / "acme_kinds"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "acme.py").write_text(ACME_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module("acme_kinds.acme")
    PROVIDERS["acme"] = module.Acme()
    try:
        yield module
    finally:
        del PROVIDERS["acme"]
        for name in ("acme_kinds.acme", "acme_kinds"):
            sys.modules.pop(name, None)


def sign(body: bytes, secret: str = ACME_SECRET) -> dict[str, str]:
    """Computed here, independently of the kind's own code."""
    return {
        "X-Acme-Signature": hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }


def test_a_new_kind_from_one_module_is_verified_stored_processed_purged_and_shown(
    acme: ModuleType, sqlite_url: str
) -> None:
    # Configuration: the kind's own shorthand variable makes its endpoint.
    settings = config.load({"ACME_SECRET": ACME_SECRET})
    assert settings.endpoints["acme"].kind == "acme" and settings.endpoints["acme"].secrets == (ACME_SECRET,)
    app = make_app(base_config(sqlite_url, ACME_SECRET=ACME_SECRET, ACME_API_TOKEN="token"))
    client = app.test_client()

    items = [
        {
            "id": "acme_1",
            "type": "order.paid",
            "order": "ord_1",
            "seq": 1,
            "note": "first item",
            "cents": 1130,
            "currency": "eur",
        },
        {"id": "acme_2", "type": "order.shipped", "order": "ord_1", "seq": 2, "note": "second item"},
    ]
    body = json.dumps({"items": items}).encode()
    # Verify: a wrong secret, a tampered body and no signature are refused; the right one is taken.
    for data, headers, reason in (
        (body, sign(body, "wrong"), "signature_mismatch"),
        (body + b" ", sign(body), "signature_mismatch"),
        (body, {}, "missing_signature"),
    ):
        refused = client.post("/webhooks/acme", data=data, headers=headers)
        assert refused.status_code == 400 and reason in refused.get_data(as_text=True), refused.get_data(as_text=True)
    assert rows(app, "SELECT count(*) AS n FROM events")[0].n == 0
    assert client.post("/webhooks/acme", data=body, headers=sign(body)).status_code == 200

    # Store: one row per batch item, under the kind.
    stored = rows(
        app, "SELECT event_id, kind, item_index, status FROM events WHERE endpoint = 'acme' ORDER BY event_id"
    )
    assert [(r.event_id, r.kind, r.item_index) for r in stored] == [("acme_1", "acme", 0), ("acme_2", "acme", 1)]

    # Process: the kind's event_data, extract, refetch and fold run; the object ends in its latest state.
    drain(app)
    assert sorted(acme.REFETCHED) == sorted(set(acme.FOLDED)) == ["acme_1", "acme_2"]  # a fold may be re-asked
    assert {r.status for r in rows(app, "SELECT status FROM events WHERE endpoint = 'acme'")} == {"processed"}
    state = rows(
        app, "SELECT version, state, last_event_id FROM objects WHERE endpoint = 'acme' AND object_id = 'ord_1'"
    )
    assert state[0].version == 2 and json.loads(state[0].state)["status"] == "order.shipped"
    assert state[0].last_event_id == "acme_2"  # the fold's ``latest``

    # Gaps: an order shipped but never paid is listed, because the kind says its orders have gaps.
    gap_body = json.dumps({"items": [{"id": "acme_3", "type": "order.shipped", "order": "ord_2", "seq": 2}]}).encode()
    assert client.post("/webhooks/acme", data=gap_body, headers=sign(gap_body)).status_code == 200
    drain(app)
    gaps = client.get("/admin/api/gaps", headers=admin_headers()).get_json()["gaps"]
    assert [(g["endpoint"], g["object_id"]) for g in gaps] == [("acme", "ord_2")]

    # Reconciliation: the kind's API lists one event already stored and the missing payment.
    acme.LISTED[:] = [items[0], {"id": "acme_4", "type": "order.paid", "order": "ord_2", "seq": 1}]
    summary = reconcile.reconcile(runtime(app), "acme", 0)
    assert (summary.seen, summary.stored, summary.added) == (2, 1, 1)
    drain(app)
    assert client.get("/admin/api/gaps", headers=admin_headers()).get_json()["gaps"] == []
    scheme = rows(app, "SELECT scheme, status FROM events WHERE endpoint = 'acme' AND event_id = 'acme_4'")
    assert [(r.scheme, r.status) for r in scheme] == [("acme-listed", "processed")]

    # Purge horizon: the kind's own, found from the events table even with no kind passed in.
    assert purge.horizon({"acme", "stripe"}) == (timedelta(days=5), "acme")
    plan = purge.Plan(timedelta(days=4), timedelta(days=8))
    with pytest.raises(purge.PurgeRefusedError, match="acme"):
        purge.purge(runtime(app).sessions, plan, kinds=set())
    assert purge.purge(runtime(app).sessions, purge.Plan(timedelta(days=6), timedelta(days=12)), kinds=set()) == 0

    # Console: the event page shows the event's own item of the batch.
    page = client.get("/admin/events/acme/acme_2", headers=admin_headers())
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and "This event's item</h3>" in html
    item_section = html.split("This event's item</h3>", 1)[1].split("</pre>", 1)[0]
    assert "second item" in item_section and "first item" not in item_section
    listing = client.get("/admin/?provider=acme", headers=admin_headers()).get_data(as_text=True)
    assert "acme_1" in listing and "acme_2" in listing
    assert "11.30 EUR" in listing  # the kind's amount
    assert "fold of 2 acme event(s)" in client.get("/admin/events/acme/acme_2", headers=admin_headers()).get_data(
        as_text=True
    )  # the kind's version in words


def test_every_registered_kind_states_its_retry_horizon_and_shorthands() -> None:
    for kind, provider in PROVIDERS.items():
        assert provider.kind == kind
        assert timedelta(0) <= provider.retry_horizon <= timedelta(days=30)
        for variable, field in provider.shorthands.items():
            assert variable.isupper() and field in {"secrets", "basic_auth"} | provider.option_names, variable
    assert purge.horizon({"hmac"}) == (timedelta(days=30), "hmac")  # no documented horizon: the longest
    assert purge.horizon({"gone"}) == (timedelta(days=30), "gone")  # a kind no longer registered
    assert config.shorthands()["ADYEN_BASIC_AUTH"] == ("adyen", "adyen", "basic_auth")


ROOT = Path(__file__).resolve().parents[2]
# Modules outside webhooks/providers/ that may name a kind, each with its reason. Anything else
# that does is provider knowledge outside its module: declare it as a capability on ``Provider``.
KIND_NAMES_ALLOWED = {
    "webhooks/worker/handlers.py": "its docstring's example of registering a handler for (kind, event type)",
    "migrations/versions/0005_adyen_fold_versions.py": "a data migration of Adyen's rows: history, never edited",
    "webhooks/engines.py": 'SQLAlchemy\'s connection-pool event "checkout", not the kind of that name',
    "webhooks/service/listen.py": "--headers standard: the mode's name (Standard Webhooks headers), not the kind",
    "webhooks/testing/catalogue.py": "webhooks.testing's test endpoint of every kind, for an application's handler tests",
}


def _outside_providers() -> Iterator[Path]:
    for top in ("webhooks", "jobs", "migrations"):
        for path in sorted((ROOT / top).rglob("*")):
            relative = path.relative_to(ROOT)
            if path.is_symlink() or any(p.is_symlink() for p in path.parents if ROOT in p.parents):
                continue  # webhooks/jobs, webhooks/migrations: read once, under their own names
            if relative.parts[:2] == ("webhooks", "providers") or path.suffix not in (".py", ".html"):
                continue
            yield path


def test_no_module_outside_the_providers_names_a_provider_kind() -> None:
    kinds = "|".join(sorted(PROVIDERS))
    pattern = re.compile(rf"""["']({kinds})["']""")
    naming = {str(p.relative_to(ROOT)): sorted(set(pattern.findall(p.read_text()))) for p in _outside_providers()}
    assert {path: found for path, found in naming.items() if found and path not in KIND_NAMES_ALLOWED} == {}
    assert all(naming.get(path) for path in KIND_NAMES_ALLOWED), "an allowed entry no longer needed: remove it"


def test_capabilities_are_declared_and_provider_modules_import_no_jobs() -> None:
    # Callers ask the declared capability (``provider.folds``), never probe for an attribute.
    probing = re.compile(r"(getattr|hasattr)\(\s*(providers?\b|providers\.get|PROVIDERS)")
    assert [str(p.relative_to(ROOT)) for p in _outside_providers() if probing.search(p.read_text())] == []
    provider_modules = sorted((ROOT / "webhooks" / "providers").glob("*.py"))
    jobs_import = re.compile(r"webhooks\.jobs|from webhooks import [^\n]*\bjobs\b|^\s*(from|import) jobs\b", re.M)
    assert [p.name for p in provider_modules if jobs_import.search(p.read_text())] == []
    for name in ("fold", "refetch", "missed", "reconcile_every", "describe_version", "amount"):
        assert callable(getattr(webhooks.providers.Provider, name)), name  # declared on the interface
    assert {k for k, p in PROVIDERS.items() if p.folds} == {"adyen"}
    assert {k: p.gap_type for k, p in PROVIDERS.items() if p.gap_type} == {"adyen": "payment"}
    assert {k for k, p in PROVIDERS.items() if p.reconcile_with} == {"stripe"}
