"""The receiver mounted inside an existing Flask app (#41; docs/embedding.md).

``Webhooks(app, url_prefix="/hooks")`` (or ``Webhooks(url_prefix=...).init_app(app)``) builds the
same app ``create_app()`` builds, from the same configuration (the environment and ``webhooks.toml``)
with its own runtime, and puts it in front of the user's app as WSGI middleware under the prefix:
``POST /hooks/webhooks/<endpoint>`` reaches ``receiver.receive.Front`` before the user's Flask app
sees anything, so its ``before_request`` hooks, CSRF extension, body parsing and
``MAX_CONTENT_LENGTH`` never touch a delivery, and the signature is verified over the bytes as sent.
With ``console=True`` the console, the admin API, ``/healthz``, ``/readyz`` and ``/metrics`` are
served under the prefix too (their links and CSRF rule follow it: the prefix is WSGI's
``SCRIPT_NAME``). Every other path goes to the user's app untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask

    from webhooks.configuration.settings import Settings

WSGI = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
RECEIVER = "/webhooks/"  # the receiver's own path, under the prefix
CONSOLE = ("/admin", "/healthz", "/readyz", "/metrics", "/static/")  # with console=True


class Webhooks:
    """A Flask extension: the receiver (and, with ``console=True``, the console) under ``url_prefix``."""

    def __init__(
        self,
        app: Flask | None = None,
        *,
        url_prefix: str = "/hooks",
        console: bool = False,
        config: Mapping[str, Any] | Settings | None = None,
    ) -> None:
        prefix = "/" + url_prefix.strip("/") if url_prefix.strip("/") else ""
        if any(c in prefix for c in "?#") or "//" in prefix:
            raise ValueError(f"url_prefix {url_prefix!r}: a path such as /hooks")
        self.url_prefix, self.console, self.config = prefix, console, config
        self.app: Flask | None = None  # the mounted webhooks app, once init_app ran
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        from webhooks import create_app

        self.app = create_app(self.config)
        app.extensions["webhooks_mount"] = self
        app.wsgi_app = Mount(app.wsgi_app, self.app.wsgi_app, self.url_prefix, self.console)  # type: ignore[method-assign]

    @property
    def runtime(self) -> Any:
        """The mounted app's runtime (``webhooks.runtime.Runtime``)."""
        assert self.app is not None, "Webhooks.init_app(app) has not run"
        return self.app.extensions["webhooks"]


class Mount:
    """WSGI: the mounted paths to the webhooks app (``SCRIPT_NAME`` + the prefix), the rest to ``user``."""

    def __init__(self, user: WSGI, mounted: WSGI, prefix: str, console: bool) -> None:
        self.user, self.mounted, self.prefix, self.console = user, mounted, prefix, console
        self.paths = (RECEIVER, *CONSOLE) if console else (RECEIVER,)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path: str = environ.get("PATH_INFO", "")
        if path.startswith(self.prefix):
            rest = path[len(self.prefix) :]
            if rest.startswith(self.paths) or (self.console and rest in ("", "/")):  # "/": to the console
                environ = {**environ, "SCRIPT_NAME": environ.get("SCRIPT_NAME", "") + self.prefix, "PATH_INFO": rest}
                return self.mounted(environ, start_response)
        return self.user(environ, start_response)
