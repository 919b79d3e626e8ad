"""The deployment files as written (#40): the Dockerfile's stages, user, health check and command;
what .dockerignore keeps out; compose.yaml's images as variables, its health checks, volumes and
secrets from .env; .env.example documenting each variable. Built and run: tests/containers."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRETS = ("DATABASE_URL", "REDIS_URL", "WEBHOOKS_ADMIN_PASSWORD", "WEBHOOKS_ENCRYPTION_KEYS", "STRIPE_WEBHOOK_SECRET")


def test_the_dockerfile_builds_in_stages_runs_as_a_user_and_checks_its_health() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\w+))?", text, re.MULTILINE)
    assert stages == [("${BASE}", "build"), ("${BASE}", "")]
    assert "ARG BASE=docker.io/library/debian:bookworm-slim" in text
    runtime = text.split("\nFROM ${BASE}\n", 1)[1]
    assert "gcc" not in runtime and "build-essential" not in runtime and "python3-venv" not in runtime
    assert "pip install -e" not in text and "--editable" not in text
    assert re.search(r"^USER 10001:10001$", runtime, re.MULTILINE)
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", runtime, re.MULTILINE)
    assert 'CMD ["webhooks", "serve", "--host", "0.0.0.0"]' in runtime
    assert 'VOLUME ["/data"]' in runtime and "DATABASE_URL=sqlite:////data/webhooks.db" in runtime
    for secret in ("PASSWORD", "SECRET", "ENCRYPTION_KEYS"):
        assert not re.search(rf"^(ENV|ARG)\b.*{secret}", text, re.MULTILINE), secret


def test_dockerignore_keeps_environments_databases_keys_and_test_output_out() -> None:
    lines = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "**"  # nothing is sent but what is named after it
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    # tests/payloads: the payloads webhooks.testing ships in the wheel (pyproject's package-dir)
    assert allowed == {"pyproject.toml", "README.md", "webhooks", "jobs", "migrations", "tests/payloads"}
    for kept_out in ("**/*.db", "**/*.key", "**/*.admin-password"):
        assert kept_out in lines
    copied = re.findall(r"^COPY (?!--from)(.+) /src/?", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert {part for line in copied for part in line.split()} <= allowed


def test_compose_names_its_images_checks_every_service_and_reads_secrets_from_dotenv() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert services["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:16}"
    assert services["redis"]["image"] == "${REDIS_IMAGE:-redis:7}"
    for name in ("release", "web", "worker"):
        assert services[name]["image"] == "${IMAGE:-webhooks:latest}" and services[name]["env_file"] == ".env"
    for name in ("postgres", "redis", "web", "worker"):  # the one-shot release step has none to pass
        assert services[name]["healthcheck"]["test"], name
    assert services["release"]["command"][:3] == ["webhooks", "db", "upgrade"]
    for name in ("web", "worker"):
        assert services[name]["depends_on"]["release"] == {"condition": "service_completed_successfully"}
        assert int(services[name]["stop_grace_period"].rstrip("s")) > 25  # WEBHOOKS_STOP_TIMEOUT
    assert set(compose["volumes"]) == {"postgres-data", "redis-data"}
    text = (ROOT / "compose.yaml").read_text()
    assert not [s for s in SECRETS if re.search(rf"{s}\s*[:=]", text)], "secrets come from .env only"


def test_env_example_documents_every_variable() -> None:
    lines = (ROOT / ".env.example").read_text().splitlines()
    names = {}
    for number, line in enumerate(lines):
        found = re.match(r"^#? ?([A-Z][A-Z0-9_]+)=", line)
        if found:
            names[found.group(1)] = number
            assert " #" not in line.split("=", 1)[1], f"an inline comment is part of the value: {line}"
    assert set(SECRETS) <= set(names)
    compose_variables = set(re.findall(r"\$\{([A-Z_]+)", (ROOT / "compose.yaml").read_text()))
    assert compose_variables <= set(names), compose_variables - set(names)
    for name, number in names.items():
        above = lines[number - 1]
        assert above.startswith("#"), f"{name} has no comment above it"
    assert "\n.env\n" in "\n" + (ROOT / ".gitignore").read_text()
