"""webhooks: a self-hosted receiver for payment and platform webhooks.

``create_app`` builds the web app (gunicorn: ``webhooks:create_app()``); ``on`` registers a
handler (``from webhooks import on``). Both load their dependencies on first use, so importing a
provider module or running ``webhooks --help`` loads no web framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask

    from webhooks.config import Settings
    from webhooks.jobs.handlers import HandlerEvent, on

__all__ = ["HandlerEvent", "create_app", "on"]


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """The app factory: the only ``Flask(...)``. ``config`` is an environment-shaped mapping or
    ready ``Settings``; None reads the environment."""
    from flask import Flask

    from webhooks import admin, health, receive
    from webhooks.config import Settings, load
    from webhooks.runtime import Runtime

    settings = config if isinstance(config, Settings) else load(config)
    app = Flask(__name__)
    rt = Runtime(settings)
    app.extensions["webhooks"] = rt  # the app's own: nothing global, so apps never share one
    receive.init_app(app)
    health.init_app(app)
    admin.init_app(app)
    if settings.embedded_queue:
        # Without Redis the work runs in this process; start it with the first request.
        app.before_request(lambda: rt.start_embedded_worker())
    return app


def __getattr__(name: str) -> Any:
    # The handler API lives with the jobs (they run it); re-exported here, loaded on first use.
    if name in ("on", "HandlerEvent"):
        from webhooks.jobs import handlers

        return getattr(handlers, name)
    raise AttributeError(f"module 'webhooks' has no attribute {name!r}")
