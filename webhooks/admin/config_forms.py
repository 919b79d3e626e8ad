"""The console's forms for runtime configuration (#32): create, edit and delete (with a
confirmation) an endpoint or a destination, add and expire its secrets, rotate a destination's.

Every change goes through ``config_api``'s operations, so the file's validation, the store's
refusals and the audit are the API's; a refusal is shown beside the field it names. A secret
typed into a form is never shown again (a refused form comes back with it blank); a generated or
rotated one is shown once, on the answer page.
"""

from __future__ import annotations

import tomllib
from typing import Any

from flask import Blueprint, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from webhooks.admin import config_api as ops
from webhooks.admin import config_json, toml_text
from webhooks.admin.auth import runtime
from webhooks.admin.config_api import InvalidError
from webhooks.configuration.live import CREDENTIALS, DESTINATION, ENDPOINT, URL, secret_url
from webhooks.providers import PROVIDERS
from webhooks.store.configuration import items as store
from webhooks.store.configuration.items import ConfigItemError
from webhooks.tables.configuration import SIGNING, ConfigItem

PLURAL = {ENDPOINT: "endpoints", DESTINATION: "destinations"}
FIELDS = frozenset({"name", "label", "provider", "secrets", "options", "value", "not_before", "expires_at"})
Page = str | tuple[str, int] | Response


def _options(text: str) -> dict[str, Any]:
    """The options textarea: the body of a TOML table."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidError("options", f"options: not TOML ({exc})") from None


def _holds_secret(text: str) -> bool:
    """Whether the options typed may hold a secret, so are not shown again."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return any(word in text.lower() for word in (*CREDENTIALS, "secret", "?", "@"))
    return bool(CREDENTIALS & set(table)) or "secret" in table or "secrets" in table or secret_url(table.get(URL))


def _placed(field: str | None) -> str:
    """The form field a refusal is shown beside (``form``: above the form)."""
    if field is None:
        return "form"
    return field if field in FIELDS else "options"


def _errors(exc: Exception) -> dict[str, str]:
    if isinstance(exc, InvalidError):
        return {_placed(exc.field): exc.message}
    assert isinstance(exc, ConfigItemError)
    return {"name" if exc.word == "exists" else "form": f"{exc} ({exc.word})"}


def _item(kind: str, name: str) -> ConfigItem | None:
    with runtime().deferred_sessions() as session:
        return next((i for i in store.items(session, kind) if i.name == name), None)


def _refused(exc: ConfigItemError) -> tuple[str, int]:
    return render_template("message.html", title="Not changed", message=f"{exc} ({exc.word})"), exc.status


def _back(kind: str, done: str) -> Response:
    return redirect(url_for(f"admin_pages.{PLURAL[kind]}_page", done=done), 303)


def _once(kind: str, name: str, value: str, **facts: Any) -> str:
    """The answer page that shows a generated or rotated secret, the only time it is shown."""
    title = f"New secret of {name}"
    return render_template("secret_once.html", title=title, kind=kind, name=name, value=value, **facts)


# ----- create and edit -------------------------------------------------------------------------
def _form(kind: str, name: str | None, values: dict[str, Any], errors: dict[str, str], status: int = 200) -> Page:
    item = _item(kind, name) if name is not None else None
    secrets = []
    if item is not None:
        with runtime().deferred_sessions() as session:
            sealed = store.secrets_of(session, [item.name]).get(item.name, [])
            secrets = [config_json.secret_json(s) for s in sealed if s.purpose == SIGNING]
    title = f"Edit {kind} {name}" if name else f"New {kind}"
    page = render_template(
        "config_form.html",
        title=title,
        kind=kind,
        plural=PLURAL[kind],
        name=name,
        values=values,
        errors=errors,
        secrets=secrets,
        providers=sorted(PROVIDERS),
    )
    return (page, status) if status != 200 else page


def _typed() -> dict[str, Any]:
    """The form's fields as typed, to show again: never the secret, nor options that may hold one."""
    values: dict[str, Any] = {k: request.form.get(k, "") for k in ("name", "label", "provider", "options")}
    if _holds_secret(values["options"]):
        values["options"], values["options_dropped"] = "", True
    return values


def new_page(kind: str) -> Page:
    if request.method == "GET":
        return _form(kind, None, {}, {})
    form = request.form
    try:
        body = _options(form.get("options", ""))
        body |= {"name": form.get("name", "").strip(), "label": form.get("label", "").strip() or None}
        if kind == ENDPOINT:
            body["provider"] = form.get("provider", "")
        secret, generated = form.get("secret", "").strip(), None
        if not secret and "secrets" not in body and "secret" not in body:
            # An endpoint's secret, when its kind lets the receiver choose it; a destination may have none.
            generated = ops.issued(body["provider"]) if kind == ENDPOINT else None
            secret = generated or ""
        if secret:
            body["secrets"] = [secret, *body.pop("secrets", [])]
        name = ops.create(kind, body)
    except (InvalidError, ConfigItemError) as exc:
        return _form(kind, None, _typed(), _errors(exc), 400)
    if generated:
        return _once(kind, name, generated)
    return _back(kind, f"{name} created")


def _prefill(kind: str, item: ConfigItem) -> dict[str, Any]:
    """The edit form's values: the stored options, never a credential (a URL holding one is left
    out: the form keeps it unless another is typed)."""
    options = dict(item.options)
    with runtime().deferred_sessions() as session:
        sealed = store.secrets_of(session, [item.name]).get(item.name, [])
    if any(s.purpose == URL for s in sealed):
        options.pop(URL, None)
    return {"label": item.label or "", "provider": item.provider or "", "options": toml_text.dumps(options)}


def edit_page(kind: str, name: str) -> Page:
    item = _item(kind, name)
    if request.method == "GET":
        if item is None:
            return _missing(kind, name)
        return _form(kind, name, _prefill(kind, item), {})
    try:
        table = _options(request.form.get("options", ""))
        stored = item.options if item is not None else {}
        patch: dict[str, Any] = {k: None for k in stored if k not in table and k != URL} | table
        patch["label"] = request.form.get("label", "").strip() or None
        if kind == ENDPOINT and request.form.get("provider"):
            patch["provider"] = request.form["provider"]
        ops.patch(kind, name, patch)
    except InvalidError as exc:
        return _form(kind, name, _typed(), _errors(exc), 400)
    except ConfigItemError as exc:
        return _refused(exc)
    return _back(kind, f"{name} changed")


def _missing(kind: str, name: str) -> tuple[str, int]:
    if name in runtime().file_settings.endpoints or name in runtime().file_settings.destinations:
        owned = f"{name!r} is defined in the configuration file: change it there"
        return _refused(ConfigItemError("managed_by_file", owned))
    return render_template("message.html", title="Not found", message=f"No {kind} named {name} in the database."), 404


# ----- delete ----------------------------------------------------------------------------------
def delete_page(kind: str, name: str) -> Page:
    error = None
    if request.method == "POST":
        if request.form.get("confirm") == "yes":
            try:
                ops.delete(kind, name)
            except ConfigItemError as exc:
                return _refused(exc)
            return _back(kind, f"{name} deleted")
        error = "Tick the box to confirm the deletion."
    elif _item(kind, name) is None:
        return _missing(kind, name)
    page = render_template("config_delete.html", title=f"Delete {kind} {name}", kind=kind, name=name, error=error)
    return (page, 400) if error else page


# ----- secrets ---------------------------------------------------------------------------------
def add_secret_page(kind: str, name: str) -> Page:
    form = request.form
    body = {k: form.get(k, "").strip() or None for k in ("value", "not_before", "expires_at")}
    try:
        secret, generated = ops.add(kind, name, body)
    except InvalidError as exc:
        return _again(kind, name, _errors(exc))
    except ConfigItemError as exc:
        if exc.word == "managed_by_file" or exc.status == 404:
            return _refused(exc)
        return _again(kind, name, {"value": f"{exc} ({exc.word})"})
    if generated is not None:
        return _once(kind, name, generated, fingerprint=secret.fingerprint)
    return _back(kind, f"{name}: secret {secret.fingerprint} added")


def _again(kind: str, name: str, errors: dict[str, str]) -> Page:
    item = _item(kind, name)
    values = _prefill(kind, item) if item is not None else {}
    return _form(kind, name, values, errors, 400)


def expire_page(kind: str, name: str, secret_id: str) -> Page:
    try:
        secret = ops.expire(kind, name, secret_id, {})
    except InvalidError as exc:
        return _again(kind, name, _errors(exc))
    except ConfigItemError as exc:
        if exc.word == "last_secret":
            return _again(kind, name, {"secrets": f"{exc} ({exc.word})"})
        return _refused(exc)
    return _back(kind, f"{name}: secret {secret.fingerprint} expired")


def rotate_page(name: str) -> Page:
    grace = request.form.get("grace_seconds", "").strip()
    try:
        body: dict[str, Any] = {"grace_seconds": float(grace)} if grace else {}
    except ValueError:
        body = {"grace_seconds": grace}  # refused by the API's own check, with its message
    try:
        secret, value, ends = ops.rotate(name, body)
    except InvalidError as exc:
        return render_template("message.html", title="Not rotated", message=exc.message), 400
    except ConfigItemError as exc:
        return _refused(exc)
    return _once(DESTINATION, name, value, fingerprint=secret.fingerprint, previous_expires_at=ends)


def init_app(pages: Blueprint) -> None:
    """Add the forms to the console's blueprint."""
    for kind, plural in PLURAL.items():
        d = {"kind": kind}
        both = ["GET", "POST"]
        pages.add_url_rule(f"/{plural}/new", f"new_{kind}", new_page, methods=both, defaults=d)
        pages.add_url_rule(f"/{plural}/<name>/edit", f"edit_{kind}", edit_page, methods=both, defaults=d)
        pages.add_url_rule(f"/{plural}/<name>/delete", f"delete_{kind}", delete_page, methods=both, defaults=d)
        add = f"/{plural}/<name>/secrets"
        pages.add_url_rule(add, f"add_{kind}_secret", add_secret_page, methods=["POST"], defaults=d)
        expire = f"/{plural}/<name>/secrets/<secret_id>/expire"
        pages.add_url_rule(expire, f"expire_{kind}_secret", expire_page, methods=["POST"], defaults=d)
    pages.add_url_rule("/destinations/<name>/rotate", view_func=rotate_page, methods=["POST"])
