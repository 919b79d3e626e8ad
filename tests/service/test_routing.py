"""The app's URL builders are made once per process (webhooks/service/routing.py) and build
exactly what Werkzeug's own build for every route."""

from __future__ import annotations

from pathlib import Path

from flask import Flask
from werkzeug.routing import IntegerConverter, Map, Rule

from tests.conftest import base_config, make_app
from webhooks.service.routing import SharedBuilderRule


def sample(rule: Rule, name: str) -> object:
    return 7 if isinstance(rule._converters[name], IntegerConverter) else "a b/é"


def test_every_route_builds_what_werkzeug_builds_and_two_apps_share_the_builders(tmp_path: Path) -> None:
    first = make_app(base_config(f"sqlite:///{tmp_path / 'a.db'}"))
    second = make_app(base_config(f"sqlite:///{tmp_path / 'b.db'}"))
    assert first.url_rule_class is SharedBuilderRule
    plain = Map(
        [Rule(r.rule, endpoint=r.endpoint, defaults=r.defaults, methods=r.methods) for r in first.url_map.iter_rules()]
    )
    theirs = plain.bind("example.org")
    ours = first.url_map.bind("example.org")
    rules = list(first.url_map.iter_rules())
    assert len(rules) > 50
    for rule in rules:
        values = {name: sample(rule, name) for name in rule.arguments if name not in (rule.defaults or {})}
        for extra in ({}, {"page": "2", "q": "x&y"}):
            assert ours.build(rule.endpoint, {**values, **extra}) == theirs.build(rule.endpoint, {**values, **extra})
    twins = {(r.rule, r.endpoint): r for r in second.url_map.iter_rules()}
    # Flask adds /static in its constructor, before create_app sets the class: the one rule left as it was
    assert [r.endpoint for r in rules if not isinstance(r, SharedBuilderRule)] == ["static"]
    for rule in [r for r in rules if isinstance(r, SharedBuilderRule)]:  # the same functions: made once
        assert rule._build.__func__ is twins[rule.rule, rule.endpoint]._build.__func__
        assert rule._build_unknown.__func__ is twins[rule.rule, rule.endpoint]._build_unknown.__func__


def test_rules_that_differ_only_in_defaults_or_converters_get_their_own_builders() -> None:
    app = Flask(__name__)
    app.url_rule_class = SharedBuilderRule
    app.add_url_rule("/p/<int:n>", "ints", lambda n: "")
    app.add_url_rule("/p/<n>", "strings", lambda n: "")
    app.add_url_rule("/q/<n>", "q_default", lambda n: "", defaults={"n": "first"})
    app.add_url_rule("/q/<n>", "q_other", lambda n: "", defaults={"n": "second"})
    with app.test_request_context():
        from flask import url_for

        assert url_for("ints", n=3) == "/p/3"
        assert url_for("strings", n="x y") == "/p/x%20y"
        assert url_for("q_default") == "/q/first"
        assert url_for("q_other") == "/q/second"
