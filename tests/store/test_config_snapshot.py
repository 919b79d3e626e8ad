"""The runtime configuration read again on every change stays cheap at 10 000 endpoints (#32):
an unchanged item is the same ``Item`` (its secrets not opened again) and the same built endpoint
or destination; a changed one, and only it, is read afresh; a secret whose window closes changes
its item; and no database destination is looked up in DNS to be validated (the connect-time guard
judges its addresses). Both databases."""

from __future__ import annotations

import base64
import socket
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from tests.store.test_config_items import KEYRING, NOW, OTHER, SECRET, session  # noqa: F401 (fixture)
from webhooks.configuration import destinations
from webhooks.configuration import live as live_config
from webhooks.configuration import settings as config
from webhooks.configuration.settings import Settings
from webhooks.errors import ConfigError
from webhooks.store.configuration import items as store


def built(items: Any, cache: dict[str, Any]) -> Settings:
    return live_config.merged(Settings(), items, lambda item, why: pytest.fail(why), cache)


def test_an_unchanged_item_is_neither_opened_nor_built_again(session: Session) -> None:  # noqa: F811
    for name in ("a", "b", "c"):
        table = {"provider": "stripe", "secrets": [SECRET]}
        store.create(session, KEYRING, "endpoint", name, table, label=None, who="ops", now=NOW)
    first = store.snapshot(session, KEYRING, now=NOW)
    cache: dict[str, Any] = {}
    settings = built(first.items, cache)

    opened: list[str] = []
    real = store.opened

    def counting(keyring: Any, item: Any, secret: Any) -> str:
        opened.append(item.name)
        return real(keyring, item, secret)

    monkey = pytest.MonkeyPatch()
    monkey.setattr("webhooks.store.configuration.snapshot.opened", counting)
    try:
        again = store.snapshot(session, KEYRING, now=NOW, previous=first.keys)
        assert opened == [] and [a is b for a, b in zip(first.items, again.items, strict=True)] == [True] * 3
        assert all(built(again.items, cache).endpoints[n] is settings.endpoints[n] for n in "abc")

        store.add_secret(session, KEYRING, "b", OTHER, expires_at=NOW + timedelta(hours=1), who="ops", now=NOW)
        changed = store.snapshot(session, KEYRING, now=NOW, previous=again.keys)
        assert sorted(set(opened)) == ["b"]  # only the changed item's secrets were opened
        rebuilt = built(changed.items, cache)
        assert (
            rebuilt.endpoints["a"] is settings.endpoints["a"] and rebuilt.endpoints["b"] is not settings.endpoints["b"]
        )
        assert len(rebuilt.endpoints["b"].secrets) == 2

        # Its window closed: the item changes although no row did.
        later = store.snapshot(session, KEYRING, now=NOW + timedelta(hours=2), previous=changed.keys)
        assert [i.table["secrets"] for i in later.items if i.name == "b"] == [[SECRET]]
    finally:
        monkey.undo()


def test_database_destinations_are_validated_without_a_dns_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    looked_up: list[str] = []

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        raise socket.gaierror("no DNS in this test")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    table = {"url": "https://orders.example.com/hooks", "secrets": [destinations.new_secret()]}
    item = live_config.Item(live_config.DESTINATION, "orders", table)
    assert built([item], {}).destinations["orders"].url == table["url"]
    live_config.check(live_config.DESTINATION, "orders", table, {})
    assert looked_up == []
    # A literal address is still judged at once: the metadata address, whatever allow_private says.
    metadata = {**table, "url": "http://169.254.169.254/latest", "allow_private": True}
    with pytest.raises(ConfigError, match="metadata"):
        live_config.check(live_config.DESTINATION, "orders", metadata, {})
    # The file's destinations are still looked up at start-up, as documented.
    config.build_destination("orders", table, {})
    assert looked_up == ["orders.example.com"]


def test_a_change_to_one_endpoint_is_read_alone_and_a_gap_reads_everything(sqlite_url: str) -> None:
    import sqlalchemy as sa

    from tests.conftest import base_config, make_app
    from webhooks.store.configuration import snapshot as config_snapshot

    keys = "k1:" + base64.b64encode(b"1" * 32).decode()
    app = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=keys))
    rt: Any = app.extensions["webhooks"]
    for name in ("a", "b", "c"):
        with rt.sessions() as s:
            store.create(s, rt.settings.keyring, "endpoint", name, {"provider": "stripe", "secrets": [SECRET]},
                         label=None, who="ops", now=NOW)  # fmt: skip
    rt.reload_config()
    held = rt.settings.endpoints["a"]
    full: list[int] = []
    real = config_snapshot.snapshot

    def counted(*args: Any, **kwargs: Any) -> Any:
        full.append(1)
        return real(*args, **kwargs)

    monkey = pytest.MonkeyPatch()
    monkey.setattr(store, "snapshot", counted)
    try:
        with rt.sessions() as s:
            store.add_secret(s, rt.settings.keyring, "b", OTHER, who="ops", now=NOW)
        rt.reload_config()
        assert full == [] and len(rt.settings.endpoints["b"].secrets) == 2  # read alone
        assert rt.settings.endpoints["a"] is held and rt.config_version == 4
        with rt.sessions() as s:
            store.remove(s, "c", who="ops", now=NOW)
        rt.reload_config()
        assert full == [] and "c" not in rt.settings.endpoints
        # A version gained with no change to show for it (a change committed out of order, or a
        # row written past the API): everything is read.
        with rt.sessions() as s:
            s.execute(sa.text("UPDATE config_version SET version = version + 1"))
            s.commit()
        rt.reload_config()
        assert full == [1] and set(rt.settings.endpoints) >= {"a", "b"} and rt.config_version == 6
        # A destination changed: endpoints forward to destinations, so everything is read.
        with rt.sessions() as s:
            table = {"url": "https://orders.example.com/in", "secrets": [destinations.new_secret()]}
            store.create(s, rt.settings.keyring, "destination", "orders", table, label=None, who="ops", now=NOW)
        rt.reload_config()
        assert full == [1, 1] and "orders" in rt.settings.destinations
    finally:
        monkey.undo()
