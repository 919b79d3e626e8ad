"""webhooks: a self-hosted receiver for payment and platform webhooks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from webhooks.config import Settings


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """The app factory: the only ``Flask(...)``. ``config`` is an environment-shaped mapping or
    ready ``Settings``; None reads the environment."""
    from webhooks import admin, health, receive
    from webhooks.config import load
    from webhooks.runtime import Runtime

    settings = config if isinstance(config, Settings) else load(config)
    app = Flask(__name__)
    app.config["WEBHOOKS_SETTINGS"] = settings
    rt = Runtime(settings).activate()
    app.extensions["webhooks"] = rt
    receive.init_app(app)
    health.init_app(app)
    admin.init_app(app)
    if settings.embedded_queue:
        # Without Redis the work runs in this process; start it with the first request.
        app.before_request(lambda: rt.start_embedded_worker())
    return app
