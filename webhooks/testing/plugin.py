"""The pytest plugin of ``webhooks.testing`` (entry point ``pytest11``: on wherever the package is
installed). It only declares fixtures and one ini option: nothing is imported, started or migrated
until a test asks for a fixture, and every fixture's name starts with ``webhook`` so it never
shadows a project's own ``app`` or ``client``.

- ``webhooks_handlers``: the modules whose ``@on`` handlers run (the ini option
  ``webhooks_handlers``, else ``WEBHOOKS_HANDLERS``); override the fixture to choose per test.
- ``webhooks_endpoints``: the endpoints, as ``webhooks.toml``'s tables; by default one of every
  kind named by its kind, with test secrets and keys (``webhooks.testing.catalogue.endpoints``).
- ``webhooks_settings``: further configuration keys (environment names) for the app.
- ``webhooks_database_url``: a migrated throwaway SQLite database (migrated once per session,
  copied for each test).
- ``webhooks_app``: the app ``create_app()`` builds from those, on the embedded queue.
- ``webhook_client``: ``WebhookClient``: ``send(endpoint, payload)``, ``run()`` → outcomes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from flask import Flask

    from webhooks.testing.apis import ProviderAPIs
    from webhooks.testing.harness import WebhookClient

HANDLERS_INI = "webhooks_handlers"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(HANDLERS_INI, "webhooks.testing: the handler modules to run (as WEBHOOKS_HANDLERS)", default="")


@pytest.fixture
def webhooks_handlers(request: pytest.FixtureRequest) -> str:
    """The handler modules, comma-separated: the ini option, else ``WEBHOOKS_HANDLERS``."""
    from webhooks.configuration.settings import variable

    handlers = str(request.config.getini(HANDLERS_INI) or "").strip() or variable("WEBHOOKS_HANDLERS") or ""
    if not handlers.strip():
        raise pytest.UsageError(
            "webhooks.testing: no handlers to test; set `webhooks_handlers = myapp.handlers` in pytest's ini "
            "file, or WEBHOOKS_HANDLERS, or override the webhooks_handlers fixture"
        )
    return handlers


@pytest.fixture(scope="session")
def webhook_provider_apis() -> Iterator[ProviderAPIs]:
    """Mailgun's event log and Mercado Pago's payments API on 127.0.0.1 (``webhooks.testing.apis``)."""
    from webhooks.testing.apis import ProviderAPIs

    apis = ProviderAPIs()
    yield apis
    apis.close()


@pytest.fixture
def webhooks_endpoints(webhook_provider_apis: ProviderAPIs) -> dict[str, dict[str, Any]]:
    """One test endpoint of every kind, named by its kind (override to test your own)."""
    from webhooks.testing.catalogue import endpoints

    webhook_provider_apis.logged.clear()
    return endpoints(webhook_provider_apis.url)


@pytest.fixture
def webhooks_settings() -> dict[str, Any]:
    """Further configuration (environment names: ``WEBHOOKS_MAX_ATTEMPTS``, ``DESTINATIONS``…)."""
    return {}


@pytest.fixture(scope="session")
def _webhooks_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webhooks.tables.revisions import upgrade

    path = tmp_path_factory.mktemp("webhooks-template") / "webhooks.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def webhooks_database_url(_webhooks_template: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite database of this test's own."""
    path = tmp_path_factory.mktemp("webhooks") / "webhooks.db"
    shutil.copyfile(_webhooks_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def webhooks_app(
    webhooks_database_url: str,
    webhooks_handlers: str,
    webhooks_endpoints: dict[str, dict[str, Any]],
    webhooks_settings: dict[str, Any],
) -> Flask:
    """``create_app()`` on the throwaway database and the embedded queue; no webhooks.toml is read,
    one attempt per event (a handler that raises leaves it ``failed`` with the error at once)."""
    from webhooks import create_app

    config: dict[str, Any] = {
        "WEBHOOKS_CONFIG": "",
        "DATABASE_URL": webhooks_database_url,
        "WEBHOOKS_HANDLERS": webhooks_handlers,
        "WEBHOOKS_EMBEDDED_WORKER": "false",
        "WEBHOOKS_MAX_ATTEMPTS": "1",
        "WEBHOOKS_RETRY_BASE_SECONDS": "0",
        "ENDPOINTS": webhooks_endpoints,
    }
    config.update(webhooks_settings)
    return create_app(config)


@pytest.fixture
def webhook_client(webhooks_app: Flask, webhook_provider_apis: ProviderAPIs) -> Iterator[WebhookClient]:
    """Sign and post deliveries, run the queued work through the handlers, read the outcomes."""
    from webhooks.testing.harness import WebhookClient

    client = WebhookClient(webhooks_app, webhook_provider_apis)
    yield client
    client.close()
