"""Operator console: the JSON API (and, later, HTML pages), behind HTTP Basic."""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    from webhooks.admin import api, rejections  # noqa: F401  (rejections adds its routes to api.bp)

    app.register_blueprint(api.bp)
