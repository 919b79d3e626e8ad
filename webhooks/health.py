"""Probes, without auth: ``GET /healthz`` (the process answers) and ``GET /readyz`` (it can take
deliveries: the database answers at the head schema revision and, unless the queue is embedded,
Redis answers). A failed readiness check is a 503 whose JSON names each check and why."""

from __future__ import annotations

from flask import Blueprint, Flask, Response, current_app, jsonify

from webhooks import schema
from webhooks.runtime import Runtime

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify(status="ok")


def checks(rt: Runtime) -> dict[str, str]:
    """Check name → ``"ok"`` or the one-line reason it failed."""
    result = {"database": schema.problem(rt.engine) or "ok"}
    if not rt.settings.embedded_queue:
        try:
            rt.queue.connection.ping()
            result["redis"] = "ok"
        except Exception as exc:  # any failure of the probe is a "not ready", never a 500
            result["redis"] = (f"Redis unreachable ({exc.__class__.__name__}): deliveries are stored "
                               "`received` and queued once it is back")
    return result


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    found = checks(current_app.extensions["webhooks"])
    failed = {name: why for name, why in found.items() if why != "ok"}
    if failed:
        return jsonify(status="unavailable", checks=found, failed=failed), 503
    return jsonify(status="ready", checks=found), 200


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
