"""``webhooks send``: sign a payload exactly as the endpoint's provider would, and post it."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import click

from webhooks import outbound, providers
from webhooks.configuration import settings as config
from webhooks.providers.base import Endpoint
from webhooks.service.cli import load_settings


@click.command()
@click.argument("endpoint")
@click.argument("payload_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--url", help="Where to post. Default: http://127.0.0.1:$PORT/webhooks/ENDPOINT.")
@click.option("--secret-index", default=0, show_default=True, help="Which configured secret signs.")
@click.option("-H", "--header", "extra", multiple=True, help="Extra or overriding header, 'Name: value'.")
@click.option("--secret", default=None, help="Sign with this secret instead of the endpoint's own.")
def send(
    endpoint: str, payload_file: Path, url: str | None, secret_index: int, extra: tuple[str, ...], secret: str | None
) -> None:
    """Sign PAYLOAD_FILE with ENDPOINT's secret and post it (a smoke test for every provider)."""
    settings = load_settings()
    target_endpoint = settings.endpoints.get(endpoint) or stored(settings, endpoint, secret)
    if target_endpoint is None:
        raise click.ClickException(missing(endpoint, list(settings.endpoints)))
    if secret is not None:
        target_endpoint = dataclasses.replace(target_endpoint, secrets=(secret,), windows=())
    provider = providers.get(target_endpoint.kind)
    body = payload_file.read_bytes()
    target = provider.post_url(url or f"http://127.0.0.1:{config.port()}/webhooks/{endpoint}", body)
    try:
        body, headers = provider.sign(target_endpoint, body, now=time.time(), secret_index=secret_index, url=target)
    except IndexError as exc:
        raise click.ClickException(f"no secret number {secret_index} on endpoint {endpoint!r}") from exc
    except (NotImplementedError, ValueError) as exc:
        raise click.ClickException(f"cannot sign for {target_endpoint.kind}: {exc}") from exc
    for line in extra:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    try:
        answer = outbound.call(target, method="POST", data=body, headers=headers, timeout=settings.outbound_timeout)
    except outbound.Unreachable as exc:
        raise click.ClickException(f"could not reach {exc}") from exc
    click.echo(f"{answer.status} {answer.body.decode('utf-8', errors='replace')}")
    if not 200 <= answer.status < 300:
        raise SystemExit(1)


def stored(settings: config.Settings, name: str, secret: str | None) -> Endpoint | None:
    """The endpoint ``name`` as the database holds it (created at runtime), read as the service
    reads it: with its key (``WEBHOOKS_ENCRYPTION_KEYS``, or the key file beside a SQLite
    database). With ``secret`` given, only its kind is needed, and no key. None: not stored."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session

    from webhooks.engines import make_engine
    from webhooks.errors import ConfigError
    from webhooks.runtime import Runtime
    from webhooks.store.configuration import items as config_items

    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).is_file()):
        return None  # never create a database file to look in it
    engine = make_engine(settings.database_url)
    try:
        with Session(engine) as session:
            item = config_items.item(session, "endpoint", name)
    except SQLAlchemyError:
        return None  # no database here (or not migrated): the file's endpoints only
    finally:
        engine.dispose()
    if item is None or not item.provider:
        return None
    if secret is not None:
        return Endpoint(name, str(item.provider), (secret,), options=dict(item.options))
    if settings.keyring is None:
        raise click.ClickException(
            f"endpoint {name!r} is stored in the database, sealed: set WEBHOOKS_ENCRYPTION_KEYS as the "
            "service has it (or run beside the database's key file), or pass --secret"
        )
    rt = Runtime(settings)
    try:
        rt.start_config(watch=False)
    except ConfigError as exc:
        raise click.ClickException(f"{exc} (or pass --secret)") from None
    finally:
        rt.engine.dispose()
    return rt.settings.endpoints.get(name)


def missing(endpoint: str, configured: list[str]) -> str:
    """What to do when ``send`` names an endpoint this shell does not configure (its environment
    is not the service's: another terminal has no ``STRIPE_WEBHOOK_SECRET``)."""
    if configured:
        return f"no endpoint {endpoint!r} (configured: {', '.join(configured)})"
    names = [variable for variable, (name, _, _) in providers.shorthands().items() if name == endpoint]
    how = f"{names[0]}=… (the service's secret)" if names else "a provider's variable (STRIPE_WEBHOOK_SECRET=…)"
    return (
        f"no endpoint {endpoint!r}: no endpoint is configured in this shell; set {how} "
        "or point WEBHOOKS_CONFIG at the service's webhooks.toml"
    )
