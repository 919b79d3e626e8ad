"""Runtime configuration as the admin API shows it (#32): endpoints and destinations from the file
and the database, their secrets as fingerprints, and the audit's rows. Never a secret's value: a
credential option is a secret row, a destination URL's query string and userinfo are shown
redacted (``webhooks.configuration.destinations.redacted``), and the file's secrets are not listed at all."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from flask import has_request_context, request

from webhooks.admin.queries import iso
from webhooks.configuration.live import CREDENTIALS
from webhooks.providers.base import Endpoint
from webhooks.runtime import Runtime
from webhooks.store.configuration.snapshot import live as live_now
from webhooks.tables.configuration import SIGNING, ConfigChange, ConfigItem, ConfigSecret


def secret_json(secret: ConfigSecret) -> dict[str, Any]:
    return {
        "id": secret.id,
        "purpose": secret.purpose,
        "fingerprint": secret.fingerprint,
        "not_before": iso(secret.not_before),
        "expires_at": iso(secret.expires_at),
        "created_at": iso(secret.created_at),
        "last_matched_at": iso(secret.last_matched_at),
    }


def stored_json(item: ConfigItem | None, secrets: list[ConfigSecret]) -> dict[str, Any]:
    if item is None:
        return {"source": "file", "label": None, "secrets": [], "created_at": None, "updated_at": None}
    return {
        "source": "database",
        "label": item.label,
        "secrets": [secret_json(s) for s in secrets],
        "created_at": iso(item.created_at),
        "updated_at": iso(item.updated_at),
    }


def endpoint_json(
    rt: Runtime, name: str, item: ConfigItem | None, secrets: list[ConfigSecret], live: Endpoint | None
) -> dict[str, Any]:
    """One endpoint as listed: from the file (``item`` None, ``live`` its configuration) or the
    database (``item``; ``live`` None when the snapshot left it out)."""
    if item is not None:
        options = {k: v for k, v in item.options.items() if k != "forward"}
        provider, forward = item.provider, list(item.options.get("forward") or [])
    else:
        assert live is not None
        options = file_options(live)
        provider, forward = live.kind, list(rt.settings.forwards.get(name, ()))
    found = {"name": name, "provider": provider, "url": f"{_mounted()}/webhooks/{name}", **stored_json(item, secrets)}
    if item is None and live is not None:  # the file's secrets: no id, a fingerprint when a key is configured
        ring = rt.settings.keyring
        found["secrets"] = [file_secret(ring.fingerprint(s.encode()) if ring else None) for s in live.secrets]
    # How many signing secrets verify now: 0 is an endpoint refusing every delivery (``no_live_secret``).
    if item is not None:
        now = datetime.now(UTC)
        live_secrets = sum(1 for s in secrets if s.purpose == SIGNING and live_now(s, now))
    else:
        live_secrets = len(live.secrets) if live is not None else 0
    # A "file" endpoint made by shorthand variables (STRIPE_WEBHOOK_SECRET) names them; else [].
    variables = list(rt.settings.variables.get(name, ())) if item is None else []
    return {**found, "forward": forward, "options": options, "live_secrets": live_secrets, "variables": variables}


def file_options(endpoint: Endpoint) -> dict[str, Any]:
    """A file endpoint's options as its TOML table gives them (``tolerance_seconds``, the rate
    limits when set, the kind's own options), credentials excepted."""
    options = {k: v for k, v in endpoint.options.items() if k not in CREDENTIALS}
    options["tolerance_seconds"] = endpoint.tolerance_seconds
    for key in ("rate_limit", "sender_rate_limit"):
        if (value := getattr(endpoint, key)) is not None:
            options[key] = value
    return options


def file_secret(fingerprint: str | None) -> dict[str, Any]:
    empty = dict.fromkeys(("not_before", "expires_at", "created_at", "last_matched_at"))
    return {"id": None, "purpose": SIGNING, "fingerprint": fingerprint, **empty}


def endpoints(rt: Runtime, stored: list[ConfigItem], sealed: Mapping[str, list[ConfigSecret]]) -> list[dict[str, Any]]:
    """The file's endpoints and the database's, by name."""
    file = rt.file_settings.endpoints
    found = [endpoint_json(rt, name, None, [], e) for name, e in file.items()]
    found += [
        endpoint_json(rt, i.name, i, sealed.get(i.name, []), rt.settings.endpoints.get(i.name))
        for i in stored
        if i.kind == "endpoint" and i.name not in file
    ]
    return sorted(found, key=lambda e: str(e["name"]))


def destination_extra(
    rt: Runtime, stored: list[ConfigItem], sealed: Mapping[str, list[ConfigSecret]]
) -> dict[str, Any]:
    """What the destinations' list gains per name (``source``, ``label``, ``secrets``): for the
    database's, from their rows; for the file's, its defaults. (Its URL is ``Destination.target``:
    redacted, whichever the source.)"""
    items = {i.name: i for i in stored if i.kind == "destination"}
    extra: dict[str, Any] = {}
    for name in rt.settings.destinations:
        item = items.get(name) if name not in rt.file_settings.destinations else None
        found = stored_json(item, sealed.get(name, []))
        extra[name] = {k: found[k] for k in ("source", "label", "secrets")}
    return extra


def change_json(change: ConfigChange) -> dict[str, Any]:
    return {
        "id": change.id,
        "at": iso(change.at),
        "who": change.who,
        "action": change.action,
        "target": change.target,
        "before": change.before,
        "after": change.after,
    }


def parse_time(value: Any, field: str) -> datetime | None:
    """An ISO 8601 time with its offset (``Z`` too), in UTC, or None; ``ValueError(field)``
    otherwise, and for a time outside years 1 to 9999 once its offset is applied
    (``0001-01-01T00:00:00+14:00`` is in year 0): no driver reads such a time back, and one stored
    row of it froze every process's configuration (the seams issue)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError(field)
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if at.tzinfo is None:
            raise ValueError(field)
        return at.astimezone(UTC)  # OverflowError past either end of datetime's range
    except (ValueError, OverflowError):
        raise ValueError(field) from None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: ``patch`` applied to ``target`` (null removes a key; a non-object replaces)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _mounted() -> str:
    """Where the app is mounted (WSGI's ``SCRIPT_NAME``: ``/hooks`` under ``Webhooks(app,
    url_prefix="/hooks")``): the path to register with a provider begins with it."""
    return request.script_root if has_request_context() else ""
