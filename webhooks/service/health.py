"""Operations: probes without auth — ``GET /healthz`` (the process answers, its version and the
runtime configuration version it holds, ``config_version``) and ``GET /readyz`` (it
can take deliveries: the database answers at the head schema revision and, unless the queue is
embedded, Redis answers; a failed check is a 503 whose JSON names each check and why), ``GET
/readyz/receiving`` (what receiving alone needs: the database; Redis down is still ready) — and
``GET /metrics`` (Prometheus text format) behind the admin's HTTP Basic auth."""

from __future__ import annotations

from flask import Blueprint, Flask, Response, current_app, jsonify
from werkzeug.wrappers import Response as BaseResponse

from webhooks.admin.auth import check_auth
from webhooks.runtime import Runtime
from webhooks.service import collector
from webhooks.service.process_setup import version
from webhooks.tables import revisions

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    rt: Runtime = current_app.extensions["webhooks"]
    return jsonify(status="ok", version=version(), config_version=rt.config_version)


def checks(rt: Runtime) -> dict[str, str]:
    """Check name → ``"ok"`` or the one-line reason it failed."""
    result = {"database": revisions.problem(rt.engine) or "ok"}
    if not rt.settings.embedded_queue:
        try:
            rt.queue.connection.ping()
            result["redis"] = "ok"
        except Exception as exc:  # any failure of the probe is a "not ready", never a 500
            result["redis"] = (
                f"Redis unreachable ({exc.__class__.__name__}): deliveries are stored "
                "`received` and queued once it is back"
            )
    return result


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    found = checks(current_app.extensions["webhooks"])
    failed = {name: why for name, why in found.items() if why != "ok"}
    if failed:
        return jsonify(status="unavailable", checks=found, failed=failed), 503
    return jsonify(status="ready", checks=found), 200


@bp.get("/readyz/receiving")
def receiving() -> tuple[Response, int]:
    """What taking deliveries needs, alone: the database at the head revision. With Redis down a
    delivery is still stored (``received``) and the sweeper queues it later, so a load balancer's
    readiness probe (the Helm chart's) keeps the pod in service; ``checks`` still says why Redis failed."""
    found = checks(current_app.extensions["webhooks"])
    if found["database"] != "ok":
        return jsonify(status="unavailable", checks=found, failed={"database": found["database"]}), 503
    return jsonify(status="ready", checks=found), 200


@bp.get("/metrics")
def scrape() -> BaseResponse:
    denied = check_auth()
    if denied is not None:
        return denied
    body, content_type = collector.exposition(current_app.extensions["webhooks"])
    return Response(body, content_type=content_type)


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
