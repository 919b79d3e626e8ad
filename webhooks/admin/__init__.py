"""Operator console: HTML pages and the JSON API, behind HTTP Basic."""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    from webhooks.admin import api, pages

    app.register_blueprint(api.bp)
    app.register_blueprint(pages.bp)
