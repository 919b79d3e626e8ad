"""Operator console: HTML pages and the JSON API, behind HTTP Basic."""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    # gaps, rejections and quarantine_pages add their routes to api.bp and pages.bp
    from webhooks.admin import api, gaps, pages, quarantine_pages, rejections  # noqa: F401

    app.register_blueprint(api.bp)
    app.register_blueprint(pages.bp)
