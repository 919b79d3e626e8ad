"""Endpoints and destinations managed while the service runs (#32): ``/admin/api/endpoints``,
the writes of ``/admin/api/destinations``, their secrets, a destination's rotation, and
``/admin/api/audit`` (every configuration change, with who made it).

The file owns what it defines: those are listed (``"source": "file"``) and every change to them
is 409 ``managed_by_file``. A table is validated by the file's own rules (400 ``invalid_config``
naming the ``field``); the store refuses the rest (409 ``exists``, ``last_secret``,
``too_many_secrets``, ``no_encryption_key``; 404 ``not_found``). After each change this process
reloads at once; the others within a second (``webhooks.runtime.watch``). A secret's value
is in one answer only: the one that generated it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, jsonify, request
from werkzeug.wrappers import Response

from webhooks.admin import config_json
from webhooks.admin.auth import runtime, who
from webhooks.admin.queries import iso, parse_id, parse_limit
from webhooks.configuration.destinations import new_secret
from webhooks.configuration.live import DESTINATION, ENDPOINT, check, field_of
from webhooks.errors import ConfigError
from webhooks.providers import PROVIDERS
from webhooks.providers.api import is_local_base
from webhooks.store.configuration import items as store
from webhooks.store.configuration.items import ConfigItemError
from webhooks.tables.configuration import ConfigSecret

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_GRACE = 604_800  # seconds a rotated-out secret may keep signing: a week
DEFAULT_GRACE = 86_400
log = logging.getLogger("webhooks.config")  # the name log filters know (the module moved, #39)
KINDS = {"endpoints": ENDPOINT, "destinations": DESTINATION}
Answer = Response | tuple[Response, int] | tuple[str, int]


TIME_RULE = "must be an ISO 8601 time with its offset, in years 1 to 9999 in UTC"


class InvalidError(Exception):
    """400 ``invalid_config``: the field and the message the file's validation gave."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def _invalid(exc: InvalidError) -> tuple[Response, int]:
    return jsonify(error="invalid_config", field=exc.field, message=exc.message), 400


def _refused(exc: ConfigItemError) -> tuple[Response, int]:
    return jsonify(error=exc.word, message=str(exc)), exc.status


MAX_DEPTH = 16  # levels of JSON nesting a body may have: no configuration needs more


def _body() -> dict[str, Any]:
    try:
        body = request.get_json(silent=True) if request.content_length else {}
    except RecursionError:  # nesting deep enough to exhaust the parser's stack: not JSON to us
        body = None
    if not isinstance(body, dict):
        raise InvalidError(None, "the body must be a JSON object")
    if _depth(body) > MAX_DEPTH:
        raise InvalidError(None, f"the body must be a JSON object nested at most {MAX_DEPTH} levels")
    return body


def _depth(value: Any) -> int:
    """How deep ``value`` nests, counted without recursion (a hostile body cannot exhaust the stack)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                todo.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _label(value: Any) -> str | None:
    """A label as stored: text of at most 200 characters, or None; the same rule for POST and PATCH."""
    if value is not None and (not isinstance(value, str) or len(value) > 200):
        raise InvalidError("label", "label must be text of at most 200 characters, or null")
    return value


def _now() -> datetime:
    return datetime.now(UTC)


def _owned(kind: str, name: str) -> None:
    """409 ``managed_by_file`` for a name the file defines (as either kind)."""
    file = runtime().file_settings
    if name in file.endpoints or name in file.destinations:
        raise ConfigItemError("managed_by_file", f"{name!r} is defined in the configuration file: change it there")


def _validated(session: Any, kind: str, name: str, table: dict[str, Any]) -> None:
    """``table`` checked by the file's rules, its ``forward`` against the destinations the database
    holds now (read in the write's own locked transaction), never one process's snapshot."""
    if kind == ENDPOINT and "api_base" in table and is_local_base(table["api_base"]):
        # This machine is the tests' fake API, set in the file; through the API it would send the
        # stored credential to whatever listens on a local port.
        raise InvalidError("api_base", "api_base may name this machine only in the configuration file (tests)")
    names = set(runtime().file_settings.destinations) | store.destination_names(session)
    try:
        check(kind, name, table, names)
    except ConfigError as exc:
        raise InvalidError(field_of(str(exc)), str(exc)) from None


def _changed(work: Callable[[Any], Any]) -> Any:
    """Run ``work(session)`` in one transaction holding the configuration write lock
    (``store.lock``): it reads, validates and commits, so a write commits only what it answers.
    Then this process's snapshot is reloaded; a reload that fails is the watcher's to retry, never
    a 500 after the change committed."""
    rt = runtime()
    with rt.sessions() as session:
        store.lock(session)
        result = work(session)
    try:
        rt.reload_config()
    except Exception as exc:  # committed: said, and left to the watcher
        log.warning("configuration changed; this process's reload failed (%s): the watcher retries", exc)
    return result


def _listed_item(kind: str, name: str) -> dict[str, Any]:
    rt = runtime()
    with rt.deferred_sessions() as session:  # this one item's rows only: 10 000 others cost nothing
        found = store.item(session, kind, name)
        assert found is not None  # (just stored)
        item = found
        sealed = store.secrets_of(session, [name])
    if kind == ENDPOINT:
        return config_json.endpoint_json(rt, name, item, sealed.get(name, []), rt.settings.endpoints.get(name))
    extra = config_json.destination_extra(rt, [item], sealed).get(name)
    options = dict(item.options)
    shown = {"name": name, "url": options.pop("url", None), "options": options}
    return {**shown, **(extra or config_json.stored_json(item, sealed.get(name, [])))}


# ----- the routes ------------------------------------------------------------------------------
def list_endpoints() -> Any:
    """Every endpoint, the file's and the database's; ``?label=`` narrows to one label."""
    rt = runtime()
    with rt.deferred_sessions() as session:
        stored, sealed = store.items(session, ENDPOINT), store.secrets_of(session)
    found = config_json.endpoints(rt, stored, sealed)
    label = request.args.get("label")
    return jsonify(endpoints=[e for e in found if label is None or e["label"] == label])


def create(kind: str, body: dict[str, Any]) -> str:
    """Validate and store a new item from ``body`` (the API's JSON object); its name."""
    name, label = body.pop("name", None), _label(body.pop("label", None))
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidError("name", "name: 1 to 100 of letters, digits and . _ -, starting with a letter or digit")
    given = body.get("secrets")
    if isinstance(given, list) and len(given) > store.MAX_LIVE:  # the cap on live secrets, at create too
        raise ConfigItemError("too_many_secrets", f"at most {store.MAX_LIVE} live secrets: send fewer")
    file = runtime().file_settings
    if name in file.endpoints or name in file.destinations:
        raise ConfigItemError("exists", f"{name!r} exists (in the configuration file)")
    keyring = runtime().settings.keyring

    def work(s: Any) -> None:
        _validated(s, kind, name, body)
        store.create(s, keyring, kind, name, body, label=label, who=who(), now=_now())

    _changed(work)
    return name


def create_item(kind: str) -> Answer:
    name = create(kind, _body())
    return jsonify(_listed_item(kind, name)), 201


def patch(kind: str, name: str, patch: dict[str, Any]) -> None:
    """Apply ``patch`` (RFC 7396) to a stored item, validated as the file would be."""
    _owned(kind, name)
    if "secrets" in patch or "secret" in patch:
        raise InvalidError("secrets", f"secrets cannot be patched: POST …/{name}/secrets, or expire one")
    if patch.get("name", name) != name:
        raise InvalidError("name", "an item cannot be renamed: create another")
    patch.pop("name", None)
    rt, now = runtime(), _now()
    relabel, label = "label" in patch, _label(patch.pop("label", None))

    def work(s: Any) -> None:  # read under the lock: a concurrent PATCH of another key is kept
        item = store.item(s, kind, name)
        if item is None:
            raise ConfigItemError("not_found", f"no {kind} named {name!r}", status=404)
        table = store.opened_table(rt.settings.keyring, item, store.secrets_of(s, [name]).get(name, []), now)
        merged = config_json.merge_patch(table, patch)
        _validated(s, kind, name, merged)
        store.update(s, rt.settings.keyring, name, merged, label=label if relabel else item.label, who=who(), now=now)

    _changed(work)


def patch_item(kind: str, name: str) -> Answer:
    patch(kind, name, _body())
    return jsonify(_listed_item(kind, name)), 200


def delete(kind: str, name: str) -> None:
    """Delete a stored item; ``in_use`` while an endpoint forwards to the destination."""
    _owned(kind, name)
    rt = runtime()

    def work(s: Any) -> None:  # the forwards read under the lock: a PATCH adding one waits, or is refused
        if store.item(s, kind, name) is None:
            raise ConfigItemError("not_found", f"no {kind} named {name!r}", status=404)
        if kind == DESTINATION:
            users = {e for e, targets in rt.file_settings.forwards.items() if name in targets}
            users |= set(store.forwarding_to(s, name))
            if users:
                listed = ", ".join(sorted(users))
                raise ConfigItemError("in_use", f"{listed} forward to {name!r}: change their forward first")
        store.remove(s, name, who=who(), now=_now())

    _changed(work)


def delete_item(kind: str, name: str) -> Answer:
    delete(kind, name)
    return "", 204


def add(kind: str, name: str, body: dict[str, Any]) -> tuple[ConfigSecret, str | None]:
    """Add a signing secret (``value``, or one generated when the kind may choose it); the secret
    and the generated value (None when it was given)."""
    _owned(kind, name)
    rt, now = runtime(), _now()
    try:
        not_before = config_json.parse_time(body.get("not_before"), "not_before")
        expires_at = config_json.parse_time(body.get("expires_at"), "expires_at")
    except ValueError as exc:
        raise InvalidError(str(exc), f"{exc} {TIME_RULE}") from None
    given = body.get("value")
    if given is not None and (not isinstance(given, str) or not given.strip()):
        raise InvalidError("value", "value must be a non-empty string")
    made: list[str] = []

    def work(s: Any) -> ConfigSecret:
        item = store.item(s, kind, name)
        if item is None:
            raise ConfigItemError("not_found", f"no {kind} named {name!r}", status=404)
        table = store.opened_table(rt.settings.keyring, item, store.secrets_of(s, [name]).get(name, []), now)
        value = given
        if value is None:
            value = issued(str(item.provider)) if kind != DESTINATION else new_secret()
            if value is None:
                raise InvalidError("value", f"{item.provider} secrets are issued by the provider: send value")
            made.append(value)
        _validated(s, kind, name, {**table, "secrets": [*table.get("secrets", []), value]})
        return store.add_secret(
            s, rt.settings.keyring, name, value, not_before=not_before, expires_at=expires_at, who=who(), now=now
        )

    secret: ConfigSecret = _changed(work)
    return secret, made[0] if made else None


def add_secret(kind: str, name: str) -> Answer:
    secret, generated = add(kind, name, _body())
    shown = config_json.secret_json(secret)
    return jsonify({**shown, "value": generated} if generated is not None else shown), 201


def issued(kind: str) -> str | None:
    """A fresh signing secret of ``kind``'s shape where the receiver may choose it; None: the
    provider issues its own."""
    provider = PROVIDERS.get(kind)
    return provider.issue_secret() if provider is not None else None


def expire(kind: str, name: str, secret_id: str, body: dict[str, Any]) -> ConfigSecret:
    """Retire a signing secret at ``body["at"]`` (now when absent)."""
    _owned(kind, name)
    now = _now()
    try:
        at = config_json.parse_time(body.get("at"), "at") or now
    except ValueError:
        raise InvalidError("at", f"at {TIME_RULE}") from None
    secret: ConfigSecret = _changed(lambda s: store.expire_secret(s, name, secret_id, at=at, who=who(), now=now))
    return secret


def expire_secret(kind: str, name: str, secret_id: str) -> Answer:
    return jsonify(config_json.secret_json(expire(kind, name, secret_id, _body()))), 200


def rotate(name: str, body: dict[str, Any]) -> tuple[ConfigSecret, str, datetime]:
    """A destination's new signing secret; the secret, its value and when the earlier ones end."""
    _owned(DESTINATION, name)
    rt, now = runtime(), _now()
    grace = body.get("grace_seconds", DEFAULT_GRACE)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= MAX_GRACE:
        raise InvalidError("grace_seconds", f"grace_seconds must be a number from 0 to {MAX_GRACE}")
    value = new_secret()
    secret, ends = _changed(
        lambda s: store.rotate(s, rt.settings.keyring, name, value, grace=float(grace), who=who(), now=now)
    )
    return secret, value, ends


def rotate_destination(name: str) -> Answer:
    secret, value, ends = rotate(name, _body())
    found = {"id": secret.id, "fingerprint": secret.fingerprint, "value": value}
    return jsonify({**found, "previous_expires_at": iso(ends)}), 201


def audit() -> Any:
    """Every configuration change, newest first; ``before`` an id to page from."""
    before, limit = parse_id(request.args.get("before")), parse_limit(request.args.get("limit"))
    with runtime().deferred_sessions() as session:
        found = store.changes(session, before=before, limit=limit)
        return jsonify(changes=[config_json.change_json(c) for c in found])


def init_app(api: Blueprint) -> None:
    """Add the routes to the admin API's blueprint (the destinations' list is ``destinations.py``'s)."""
    api.register_error_handler(InvalidError, _invalid)
    api.register_error_handler(ConfigItemError, _refused)
    api.add_url_rule("/endpoints", view_func=list_endpoints, methods=["GET"])
    for plural, kind in KINDS.items():
        d = {"kind": kind}
        api.add_url_rule(f"/{plural}", f"create_{kind}", create_item, methods=["POST"], defaults=d)
        api.add_url_rule(f"/{plural}/<name>", f"patch_{kind}", patch_item, methods=["PATCH"], defaults=d)
        api.add_url_rule(f"/{plural}/<name>", f"delete_{kind}", delete_item, methods=["DELETE"], defaults=d)
        api.add_url_rule(f"/{plural}/<name>/secrets", f"add_{kind}_secret", add_secret, methods=["POST"], defaults=d)
        expire = f"/{plural}/<name>/secrets/<secret_id>/expire"
        api.add_url_rule(expire, f"expire_{kind}_secret", expire_secret, methods=["POST"], defaults=d)
    api.add_url_rule("/destinations/<name>/rotate", view_func=rotate_destination, methods=["POST"])
    api.add_url_rule("/audit", view_func=audit, methods=["GET"])
