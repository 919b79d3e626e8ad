"""Configuration: environment, TOML file, ``env:`` references, shorthands, fail-closed validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhooks.configuration.settings import UNSIGNED_RATE_LIMIT, UNSIGNED_SENDER_RATE_LIMIT, load
from webhooks.errors import ConfigError


def test_defaults_are_the_embedded_default() -> None:
    settings = load({})
    assert settings.database_url == "sqlite:///webhooks.db"
    assert settings.embedded_queue and settings.endpoints == {}


@pytest.mark.parametrize("url", ["postgres://u:p@h:5432/db", "postgresql://u:p@h:5432/db"])
def test_postgres_urls_use_psycopg(url: str) -> None:
    assert load({"DATABASE_URL": url}).database_url == "postgresql+psycopg://u:p@h:5432/db"


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///webhooks.db",
        "sqlite+pysqlite:///webhooks.db",
        "sqlite:///file:missing-dir/x.db?mode=memory&uri=true",
        "postgresql+psycopg://u:p@h/db",
        "postgresql://u@/db?host=a,b&port=5432,5432&target_session_attrs=read-write",
    ],
)
def test_every_supported_database_url_loads(url: str) -> None:
    assert load({"DATABASE_URL": url}).database_url.split("://")[0] in (
        "sqlite",
        "sqlite+pysqlite",
        "postgresql+psycopg",
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgress://u:secret@h/db", "unsupported database scheme 'postgress':// (did you mean postgresql://?)"),
        ("mysql://u:secret@h/db", "unsupported database scheme 'mysql':// (supported: PostgreSQL and SQLite"),
        ("postgresql+psycopg2://u:secret@h/db", "(did you mean postgresql://?)"),
        ("not-a-url", "DATABASE_URL is not a database URL; expected postgresql://"),
        ("sqlite://webhooks.db", "a SQLite URL is sqlite:///relative/path.db or sqlite:////absolute/path.db"),
        ("sqlite:////no/such/dir/x.db", "directory '/no/such/dir' does not exist; create it or fix the path"),
    ],
)
def test_a_wrong_database_url_fails_at_load_without_its_password(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load({"DATABASE_URL": url})
    assert message in str(raised.value)
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:6379", "REDIS_URL is not a Redis URL; expected redis://"),
        ("http://localhost:6379", "REDIS_URL is not a Redis URL; expected redis://"),
        ("redis://:secret@h:port/0", "REDIS_URL: the port must be a number"),
    ],
)
def test_a_wrong_redis_url_fails_at_load_without_its_password(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load({"REDIS_URL": url})
    assert message in str(raised.value)
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize("url", ["redis://h", "rediss://:p@h:6380/2", "unix:///run/redis.sock", "redis+sentinel://a/m"])
def test_every_supported_redis_url_loads(url: str) -> None:
    assert load({"REDIS_URL": url}).redis_url == url


def test_shorthands_define_endpoints() -> None:
    settings = load({"STRIPE_WEBHOOK_SECRET": "whsec_a", "ADYEN_HMAC_KEY": "AB12", "ADYEN_BASIC_AUTH": "u:p"})
    assert settings.endpoints["stripe"].secrets == ("whsec_a",)
    assert settings.endpoints["adyen"].kind == "adyen"
    assert settings.endpoints["adyen"].basic_auth == "u:p"


def test_toml_file_with_env_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "endpoints.toml"
    path.write_text(
        '[endpoints.payments]\nprovider = "stripe"\nsecrets = ["env:OLD_SECRET", "whsec_new"]\n'
        "tolerance_seconds = 600\n"
    )
    settings = load({"WEBHOOKS_CONFIG": str(path), "OLD_SECRET": "whsec_old"})
    endpoint = settings.endpoints["payments"]
    assert (endpoint.kind, endpoint.secrets, endpoint.tolerance_seconds) == ("stripe", ("whsec_old", "whsec_new"), 600)


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ({"provider": "nope", "secrets": ["x"]}, "unknown provider kind 'nope'"),
        ({"provider": "stripe", "secrets": []}, "no secret configured"),
        ({"provider": "stripe", "secrets": [""]}, "no secret configured"),
        ({"provider": "stripe", "secrets": ["env:MISSING_VAR"]}, "MISSING_VAR is not set"),
        ({"provider": "adyen", "secrets": ["not-hex"]}, "not hex"),
        ({"provider": "adyen", "secrets": ["AB"], "basic_auth": "nocolon"}, "basic_auth"),
        ({"provider": "stripe", "secrets": ["x"], "tolerance_seconds": -1}, "tolerance_seconds"),
    ],
)
def test_bad_endpoints_fail_closed_naming_the_endpoint(endpoint: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load({"ENDPOINTS": {"shop": endpoint}})
    assert "'shop'" in str(info.value) and message in str(info.value)


def test_bad_numbers_are_refused() -> None:
    with pytest.raises(ConfigError, match="WEBHOOKS_MAX_ATTEMPTS"):
        load({"WEBHOOKS_MAX_ATTEMPTS": "many"})


MOLLIE_KEY = "test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM"


def test_a_kind_that_signs_nothing_is_rate_limited_by_default() -> None:
    endpoints = {
        "classic": {"provider": "mollie", "api_key": MOLLIE_KEY},
        "classic_set": {"provider": "mollie", "api_key": MOLLIE_KEY, "rate_limit": 200, "sender_rate_limit": 2.5},
        "signed": {"provider": "mollie", "secrets": ["mollie-signing-secret"]},
        "stripe": {"provider": "stripe", "secrets": ["whsec_a"], "sender_rate_limit": 3},
    }
    found = {name: (e.rate_limit, e.sender_rate_limit) for name, e in load({"ENDPOINTS": endpoints}).endpoints.items()}
    assert found == {
        "classic": (UNSIGNED_RATE_LIMIT, UNSIGNED_SENDER_RATE_LIMIT),
        "classic_set": (200, 2.5),  # explicit values replace the defaults
        "signed": (None, None),  # signed: unlimited unless configured
        "stripe": (None, 3),
    }
    assert (UNSIGNED_RATE_LIMIT, UNSIGNED_SENDER_RATE_LIMIT) == (20, 10)  # as docs/quickstart.md says
    shorthand = load({"MOLLIE_API_KEY": MOLLIE_KEY}).endpoints["mollie"]
    assert (shorthand.rate_limit, shorthand.sender_rate_limit) == (UNSIGNED_RATE_LIMIT, UNSIGNED_SENDER_RATE_LIMIT)


@pytest.mark.parametrize("key", ["rate_limit", "sender_rate_limit"])
@pytest.mark.parametrize("value", [0, -1, "5", True, float("nan")])
def test_rate_limits_must_be_positive_numbers(key: str, value: object) -> None:
    for endpoint in ({"provider": "stripe", "secrets": ["whsec_a"]}, {"provider": "mollie", "api_key": MOLLIE_KEY}):
        with pytest.raises(ConfigError) as info:
            load({"ENDPOINTS": {"shop": {**endpoint, key: value}}})
        assert str(info.value) == f"endpoint 'shop': {key} must be a positive number of requests a second"


def test_an_empty_webhooks_config_means_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "webhooks.toml").write_text('[endpoints.shop]\nprovider = "stripe"\nsecrets = ["whsec_file"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WEBHOOKS_CONFIG", raising=False)
    assert set(load({}).endpoints) == {"shop"}  # unset: ./webhooks.toml
    assert load({"WEBHOOKS_CONFIG": ""}).endpoints == {}  # set but empty: no file
    monkeypatch.setenv("WEBHOOKS_CONFIG", "")
    assert load().endpoints == {}
    assert load({}).endpoints == {}  # a mapping without the key takes the process's


SHOP_STRIPE = '[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["whsec_file"]\n'


def test_an_endpoint_in_the_file_and_a_shorthand_is_refused_naming_both(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from webhooks.service.cli import main

    path = tmp_path / "webhooks.toml"
    path.write_text(SHOP_STRIPE)
    with pytest.raises(ConfigError) as info:
        load({"WEBHOOKS_CONFIG": str(path), "STRIPE_WEBHOOK_SECRET": "whsec_env"})
    message = str(info.value)
    assert "'stripe'" in message and str(path) in message and "STRIPE_WEBHOOK_SECRET" in message
    assert "\n" not in message
    env = {"WEBHOOKS_CONFIG": str(path), "STRIPE_WEBHOOK_SECRET": "whsec_env", "DATABASE_URL": "sqlite://"}
    result = CliRunner().invoke(main, ["events", "list"], env=env)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"Error: configuration: {message}"]


def test_a_shorthand_never_fills_a_key_of_a_table_the_file_defines(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text('[endpoints.adyen]\nsecrets = ["env:ADYEN_HMAC_KEY"]\n')
    env = {"WEBHOOKS_CONFIG": str(path), "ADYEN_HMAC_KEY": "AB12"}
    assert load(env).endpoints["adyen"].basic_auth is None
    with pytest.raises(ConfigError, match=r"'adyen' is defined both in .* and by ADYEN_BASIC_AUTH"):
        load({**env, "ADYEN_BASIC_AUTH": "u:p"})  # not read by the table: it would be silently ignored


def test_a_table_that_reads_the_shorthand_through_env_is_not_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text(
        '[endpoints.stripe]\nsecrets = ["env:STRIPE_WEBHOOK_SECRET", "whsec_next"]\ntolerance_seconds = 60\n'
        '[endpoints.adyen]\nsecrets = ["env:ADYEN_HMAC_KEY"]\nbasic_auth = "env:ADYEN_BASIC_AUTH"\n'
    )
    env = {
        "WEBHOOKS_CONFIG": str(path),
        "STRIPE_WEBHOOK_SECRET": "whsec_env",
        "ADYEN_HMAC_KEY": "AB12",
        "ADYEN_BASIC_AUTH": "u:p",
    }
    endpoints = load(env).endpoints
    assert (endpoints["stripe"].secrets, endpoints["stripe"].tolerance_seconds) == (("whsec_env", "whsec_next"), 60)
    assert (endpoints["adyen"].secrets, endpoints["adyen"].basic_auth) == (("AB12",), "u:p")
