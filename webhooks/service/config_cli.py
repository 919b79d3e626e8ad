"""``webhooks config plan|apply FILE [--prune]`` and ``webhooks config export`` (#32): the
database's endpoints and destinations kept as a file in git.

FILE has the ``[endpoints.*]`` and ``[destinations.*]`` tables of ``webhooks.toml`` (plus an
optional ``label``); its ``env:NAME`` values are read through ``webhooks.configuration.settings.variable``, the
one reader of the environment. FILE is an input to this command, not the deployment's
configuration, so it is read here; the deployment's own file is ``config.load()``'s, and its items
are never touched: a FILE item of the same name is an error naming it. Validation is the file's
(``live_config.check``, as the admin API's).
"""

from __future__ import annotations

import getpass
import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from sqlalchemy.orm import Session

from webhooks import guard
from webhooks.configuration import settings as config
from webhooks.configuration.live import DESTINATION, ENDPOINT, check, merged
from webhooks.configuration.settings import Settings
from webhooks.errors import ConfigError, WebhooksError
from webhooks.store.configuration import items as store
from webhooks.store.configuration import plan as config_plan
from webhooks.store.configuration.plan import Wanted
from webhooks.tables.configuration import SIGNING, ConfigSecret

SECTIONS = {"endpoints": ENDPOINT, "destinations": DESTINATION}
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def who() -> str:
    """The audit's ``who`` for a change made from the command line."""
    return f"cli:{getpass.getuser()}"


@contextmanager
def session_for(settings: Settings) -> Iterator[Session]:
    from webhooks.engines import make_engine, make_sessionmaker

    engine = make_engine(settings.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            yield session
    finally:
        engine.dispose()


def _resolved(where: str, value: Any) -> Any:
    if isinstance(value, str) and value.startswith("env:"):
        found = config.variable(value[4:])
        if not found:
            raise click.ClickException(f"{where}: environment variable {value[4:]} is not set")
        return found
    if isinstance(value, list):
        return [_resolved(where, v) for v in value]
    if isinstance(value, dict):
        return {k: _resolved(where, v) for k, v in value.items()}
    return value


def read_file(path: Path, settings: Settings) -> dict[str, Wanted]:
    """FILE's items by name, ``env:`` values resolved; a click error naming what is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.ClickException(f"{path}: {exc}") from exc
    wanted: dict[str, Wanted] = {}
    for section in data:
        if section not in SECTIONS:
            raise click.ClickException(f"{path}: unknown table {section!r} (known: endpoints, destinations)")
    for section, kind in SECTIONS.items():
        for name, table in (data.get(section) or {}).items():
            where = f"{path}: {kind} {name!r}"
            if not isinstance(table, dict):
                raise click.ClickException(f"{where}: must be a table")
            if name in settings.endpoints or name in settings.destinations:
                raise click.ClickException(f"{where} is defined in the deployment's own configuration: change it there")
            if name in wanted:
                raise click.ClickException(f"{where}: the name is also a {wanted[name].kind}")
            label = table.pop("label", None)
            if label is not None and not isinstance(label, str):
                raise click.ClickException(f"{where}: label must be text")
            wanted[name] = Wanted(kind, _resolved(where, table), label)
    return wanted


def _validate(session: Session, settings: Settings, wanted: dict[str, Wanted], prune: bool) -> None:
    """The file's rules for each item; an endpoint's ``forward`` may name the deployment's
    destinations, FILE's, and (without ``--prune``) those the database keeps."""
    destinations: dict[str, Any] = dict(settings.destinations)
    if not prune:
        snap = store.snapshot(session, settings.keyring, now=datetime.now(UTC))
        destinations.update(merged(settings, snap.items, lambda item, why: None).destinations)
    for name, item in sorted(wanted.items(), key=lambda pair: pair[1].kind != DESTINATION):
        try:
            check(item.kind, name, item.table, destinations)
            if item.kind == DESTINATION:
                destinations[name] = config.build_destination(name, item.table, {}, guard.no_lookup)
        except ConfigError as exc:
            raise click.ClickException(f"invalid {item.kind} {name!r}: {exc}") from exc


@click.group("config")
def config_group() -> None:
    """Plan, apply and export the database's endpoints and destinations as a file."""


def _run(file: Path, prune: bool, *, write: bool) -> None:
    from webhooks.service.cli import load_settings

    settings = load_settings()
    wanted = read_file(file, settings)
    now = datetime.now(UTC)
    with session_for(settings) as session:
        try:
            _validate(session, settings, wanted, prune)
            changes = config_plan.plan(session, settings.keyring, wanted, prune=prune, now=now)
            lines = [change.line(settings.keyring) for change in changes]
            if write and changes:
                config_plan.apply(session, settings.keyring, changes, who=who(), now=now)
        except WebhooksError as exc:
            raise click.ClickException(str(exc)) from exc
    for line in lines or ["no changes"]:
        click.echo(line)
    if write and changes:
        click.echo(f"applied {len(changes)} change{'s' if len(changes) != 1 else ''} as {who()}")


@config_group.command("plan")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--prune", is_flag=True, help="also delete the database's items FILE does not name")
def plan(file: Path, prune: bool) -> None:
    """Print what `config apply FILE` would change in the database, one line per name."""
    _run(file, prune, write=False)


@config_group.command("apply")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--prune", is_flag=True, help="also delete the database's items FILE does not name")
def apply(file: Path, prune: bool) -> None:
    """Make the database's items what FILE says, in one transaction (each change audited)."""
    _run(file, prune, write=True)


def placeholder_item(name: str) -> str:
    """``<ITEM>`` of ``WEBHOOKS_SECRET_<ITEM>_<N>``: the name upper-cased, other characters ``_``."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise click.ClickException(f"cannot write {type(value).__name__} as TOML")


def _key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else json.dumps(key)


def _signing_order(secret: ConfigSecret) -> tuple[bool, datetime]:
    """As the database signs: secrets that do not end first, then by age."""
    return (secret.expires_at is not None, secret.created_at)


def export_text(settings: Settings) -> str:
    """The database's items as FILE text, each secret an ``env:`` placeholder, never a value."""
    now = datetime.now(UTC)
    with session_for(settings) as session:
        items, sealed = store.items(session), store.secrets_of(session)
    taken: dict[str, str] = {}
    for item in items:
        other = taken.setdefault(placeholder_item(item.name), item.name)
        if other != item.name:
            raise click.ClickException(
                f"{other!r} and {item.name!r} both make WEBHOOKS_SECRET_{placeholder_item(item.name)}_<N>: rename one"
            )
    out = ["# webhooks config export: the database's items; set each WEBHOOKS_SECRET_ variable before apply", ""]
    for item in sorted(items, key=lambda i: (i.kind != DESTINATION, i.name)):
        section = "destinations" if item.kind == DESTINATION else "endpoints"
        table: dict[str, Any] = {"provider": item.provider} if item.kind == ENDPOINT else {}
        table.update(item.options)
        if item.label is not None:
            table["label"] = item.label
        mine = sealed.get(item.name, [])
        signing = sorted((s for s in mine if s.purpose == SIGNING and store.live(s, now)), key=_signing_order)
        credentials = sorted((s for s in mine if s.purpose != SIGNING), key=lambda s: s.purpose)
        notes, placeholders = [], []
        for n, secret in enumerate([*signing, *credentials], 1):
            variable = f"{config.SECRET_PREFIX}{placeholder_item(item.name)}_{n}"
            notes.append(
                f"# {variable}: {secret.purpose if secret.purpose != SIGNING else 'secret'} {secret.fingerprint}"
            )
            placeholders.append(f"env:{variable}")
            if secret.purpose != SIGNING:
                table[secret.purpose] = f"env:{variable}"
        if signing:
            table["secrets"] = placeholders[: len(signing)]
        out += [f"[{section}.{_key(item.name)}]", *notes]
        out += [f"{_key(k)} = {_toml(v)}" for k, v in table.items() if v is not None] + [""]
    return "\n".join(out)


@config_group.command("export")
def export() -> None:
    """Print the database's items (not the file's) as TOML that `config apply` accepts."""
    from webhooks.service.cli import load_settings

    click.echo(export_text(load_settings()), nl=False)
