"""A key nobody reads is refused at start-up, naming it and the closest known key: a typo never
silently falls back to a default (``tolerance_second`` would keep 300 s)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from webhooks.configuration.settings import load
from webhooks.errors import ConfigError
from webhooks.service.cli import main


def refusal(tmp_path: Path, table: str) -> str:
    """The start-up error for a webhooks.toml whose endpoint ``pay`` is ``table``."""
    path = tmp_path / "webhooks.toml"
    path.write_text(f"[endpoints.pay]\n{table}\n")
    with pytest.raises(ConfigError) as caught:
        load({"WEBHOOKS_CONFIG": str(path)})
    return str(caught.value)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'provider = "stripe"\nsecrets = ["whsec_a"]\ntolerance_second = 600',
            "endpoint 'pay': unknown key 'tolerance_second' (did you mean 'tolerance_seconds'?)",
        ),
        (
            'provider = "twilio"\nsecrets = ["tok"]\npublic_url = "https://x.example/t"\npublic_ulr = "https://y.example/t"',
            "endpoint 'pay': unknown key 'public_ulr' (did you mean 'public_url'?)",
        ),
        (
            'provider = "adyen"\nsecrets = ["AB12"]\nbasicauth = "u:p"',
            "endpoint 'pay': unknown key 'basicauth' (did you mean 'basic_auth'?)",
        ),
        (
            'provider = "github"\nsecret = "s"\nrate_limt = 5',
            "endpoint 'pay': unknown key 'rate_limt' (did you mean 'rate_limit'?)",
        ),
        (
            'provider = "hmac"\nsecrets = ["s"]\nheader = "X-Sig"\nid_heder = "X-Id"',
            "endpoint 'pay': unknown key 'id_heder' (did you mean 'id_header'?)",
        ),
    ],
)
def test_a_misspelt_endpoint_key_stops_start_up(tmp_path: Path, table: str, message: str) -> None:
    assert refusal(tmp_path, table) == message


def test_a_misspelt_top_level_table_stops_start_up(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text('[endpoint.stripe]\nprovider = "stripe"\nsecrets = ["whsec_a"]\n')
    with pytest.raises(ConfigError, match=r"unknown key 'endpoint' \(did you mean 'endpoints'\?\)"):
        load({"WEBHOOKS_CONFIG": str(path)})


def test_every_documented_option_is_still_accepted(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text(
        '[endpoints.s]\nprovider = "stripe"\nsecrets = ["whsec_a"]\ntolerance_seconds = 60\nrate_limit = 5\n'
        'api_key = "sk_test"\napi_base = "http://127.0.0.1:1"\n'
        '[endpoints.t]\nprovider = "twilio"\nsecrets = ["tok"]\npublic_url = "https://x.example/t"\n'
        'shared_key_id = "k"\n'
        '[endpoints.sh]\nprovider = "shopify"\nsecrets = ["s"]\ntopic = "orders/paid"\n'
    )
    assert set(load({"WEBHOOKS_CONFIG": str(path)}).endpoints) == {"s", "t", "sh"}


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text('[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["whsec_a"]\ntolerance_second = 600\n')
    result = CliRunner().invoke(main, ["events", "list"], env={"WEBHOOKS_CONFIG": str(path)})
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "Error: configuration: endpoint 'stripe': unknown key 'tolerance_second' (did you mean 'tolerance_seconds'?)"
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('refetch = "true"\napi_key = "sk_test"', "endpoint 'pay': refetch must be true or false"),
        ("refetch = true", "endpoint 'pay': refetch and reconcile_every need api_key"),
        ('reconcile_every = "15m"', "endpoint 'pay': refetch and reconcile_every need api_key"),
        ('reconcile_every = "30s"\napi_key = "sk_test"', "endpoint 'pay': reconcile_every must be at least 60 s"),
        (
            'reconcile_every = "often"\napi_key = "sk_test"',
            "endpoint 'pay': reconcile_every: not a duration: 'often' (use e.g. 30d, 12h, 90m)",
        ),
    ],
)
def test_stripe_api_options_are_checked_at_start_up(tmp_path: Path, table: str, message: str) -> None:
    assert refusal(tmp_path, f'provider = "stripe"\nsecrets = ["whsec_a"]\n{table}') == message
