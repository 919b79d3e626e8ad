"""The named API tokens as the operator sees them: ``GET /admin/api/tokens`` and ``/admin/tokens``.

Name, access, creation, last use and revocation; never the hash (nor the token, which only
``webhooks tokens create`` ever shows). Tokens are created and revoked from the CLI
(``tokens_cli.py``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template

from webhooks.admin import tokens
from webhooks.admin.auth import runtime
from webhooks.admin.queries import iso


def token_json(token: tokens.Token) -> dict[str, Any]:
    return {
        "name": token.name,
        "read_only": token.read_only,
        "created_at": iso(token.created_at),
        "last_used_at": iso(token.last_used_at),
        "revoked_at": iso(token.revoked_at),
    }


def _listed() -> list[dict[str, Any]]:
    with runtime().deferred_sessions() as session:
        return [token_json(t) for t in tokens.listed(session)]


def list_tokens() -> Any:
    """Every token, revoked ones too, oldest first."""
    return jsonify(tokens=_listed())


def tokens_page() -> str:
    return render_template("tokens.html", title="API tokens", rows=_listed())


def init_app(api: Blueprint, pages: Blueprint) -> None:
    """Add the list to the admin API's blueprint and the page to the console's."""
    api.add_url_rule("/tokens", view_func=list_tokens, methods=["GET"])
    pages.add_url_rule("/tokens", view_func=tokens_page, methods=["GET"])
