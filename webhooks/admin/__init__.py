"""Operator console: HTML pages and the JSON API, behind HTTP Basic (the API also takes named tokens)."""

from __future__ import annotations

from functools import cache

from flask import Blueprint, Flask


@cache
def blueprints() -> tuple[Blueprint, Blueprint]:
    """The API's and the pages' blueprints with every console module's routes on them; built once
    per process, as the blueprints are module-level and a route may be added to one only once."""
    from webhooks.admin import (
        api,
        config_api,
        config_forms,
        config_pages,
        destinations,
        filter_test,
        gaps,
        pages,
        quarantine_pages,
        rejections,
        stream,
        token_views,
    )

    rejections.init_app(api.bp)
    quarantine_pages.init_app(pages.bp)
    gaps.init_app(api.bp, pages.bp)
    destinations.init_app(api.bp, pages.bp)
    token_views.init_app(api.bp, pages.bp)
    config_api.init_app(api.bp)
    config_pages.init_app(pages.bp)
    config_forms.init_app(pages.bp)
    stream.init_app(api.bp)
    filter_test.init_app(api.bp, pages.bp)
    return api.bp, pages.bp


def init_app(app: Flask) -> None:
    from webhooks.admin.stream import listeners_max
    from webhooks.admin.throttle import LoginThrottle
    from webhooks.runtime import Runtime

    for bp in blueprints():
        app.register_blueprint(bp)
    rt: Runtime = app.extensions["webhooks"]
    # Service-wide on a real Redis; per process on the embedded default (its fakeredis is this process's).
    connection = rt.queue.connection if rt.settings.redis_url else None
    app.extensions["webhooks_login_throttle"] = LoginThrottle(connection, deployment=rt.settings.queue_name)
    app.extensions["webhooks_listeners_max"] = listeners_max()  # the event stream's cap, checked at start
