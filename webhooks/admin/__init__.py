"""Operator console: the JSON API (and, later, HTML pages), behind HTTP Basic."""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    from webhooks.admin import api

    app.register_blueprint(api.bp)
