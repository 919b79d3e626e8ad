"""webhooks: a self-hosted receiver for payment and platform webhooks.

``create_app`` builds the web app (gunicorn: ``webhooks:create_app()``); ``on`` registers a
handler (``from webhooks import on``). Both load their dependencies on first use, so importing a
provider module or running ``webhooks --help`` loads no web framework.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any


def _prefer_installed() -> bool:
    """Whether this is a source tree's ``webhooks/`` that shadowed the installed package, now
    replaced by it (``sys.modules["webhooks"]`` and ``sys.path`` without the tree's root).

    ``python -m``, gunicorn (its ``chdir``, by default the working directory) and ``rq worker``
    (its ``--path .``) put the working directory first on ``sys.path``. Run from a clone with a
    non-editable install, they would import the clone's ``webhooks/``, which has no ``jobs`` (the
    install maps the top-level ``jobs/`` to ``webhooks.jobs``): every job would fail to import.
    An installed package holds ``webhooks/jobs``; an editable install's finder maps it; only a
    source tree that is neither gives way, and only to another ``webhooks`` on the path.
    """
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.isdir(_os.path.join(here, "jobs")):
        return False  # an installed package
    import importlib.util

    if importlib.util.find_spec("webhooks.jobs") is not None:
        return False  # this tree, installed editable: its finder maps jobs/ to webhooks.jobs
    root = _os.path.realpath(_os.path.dirname(here))
    rest = [p for p in _sys.path if _os.path.realpath(p or _os.curdir) != root]
    from importlib.machinery import PathFinder

    if PathFinder.find_spec("webhooks", rest) is None:
        return False  # nothing else to run: a job's import names the problem (webhooks.queue.check_job)
    _sys.path[:] = rest
    del _sys.modules["webhooks"]
    import importlib

    # The import system hands the importer whatever ``sys.modules`` holds once this file has run.
    _sys.modules["webhooks"] = importlib.import_module("webhooks")
    return True


_prefer_installed()

if TYPE_CHECKING:
    from flask import Flask

    from webhooks.configuration.settings import Settings
    from webhooks.runtime import Runtime
    from webhooks.worker.handlers import HandlerEvent, on

__all__ = ["HandlerEvent", "create_app", "on"]


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """The app factory: the only ``Flask(...)``. ``config`` is an environment-shaped mapping or
    ready ``Settings``; None reads the environment."""
    from flask import Flask

    from webhooks import admin
    from webhooks.configuration.settings import Settings, load
    from webhooks.receiver import receive
    from webhooks.runtime import Runtime
    from webhooks.service import health
    from webhooks.service.routing import SharedBuilderRule

    settings = config if isinstance(config, Settings) else load(config)
    app = Flask(__name__)
    app.url_rule_class = SharedBuilderRule  # URL builders made once per process, not per app
    rt = Runtime(settings)
    rt.start_config()  # the database's endpoints and destinations, followed live
    app.extensions["webhooks"] = rt  # the app's own: nothing global, so apps never share one
    receive.init_app(app)
    health.init_app(app)
    admin.init_app(app)
    app.add_url_rule("/", "index", _index)
    if settings.embedded_queue and settings.embedded_worker:
        # Without Redis the work runs in this process; start it with the first request (of any
        # route: deliveries are answered by receive.Front, ahead of Flask).
        app.wsgi_app = _StartingWorker(app.wsgi_app, rt)  # type: ignore[method-assign]  # Flask's way to add WSGI middleware
    return app


def _index() -> Any:
    """``/``: a redirect to the console, where a person opening the service's URL means to go."""
    from flask import redirect, url_for

    return redirect(url_for("admin_pages.events"))


class _StartingWorker:
    """WSGI: starts the app's embedded worker with the first request, then passes it on."""

    def __init__(self, wsgi: Callable[..., Iterable[bytes]], rt: Runtime) -> None:
        self.wsgi, self.rt = wsgi, rt

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self.rt.queue.embedded is None:
            from webhooks.worker import embedded

            embedded.start_embedded(self.rt)
        return self.wsgi(environ, start_response)


def __getattr__(name: str) -> Any:
    # The handler API (``webhooks.worker.handlers``), loaded on first use: importing a provider module
    # or running ``webhooks --help`` does not import SQLAlchemy's ORM.
    if name in ("on", "HandlerEvent"):
        from webhooks.worker import handlers

        return getattr(handlers, name)
    raise AttributeError(f"module 'webhooks' has no attribute {name!r}")
