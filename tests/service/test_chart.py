"""The Helm chart (#40, deploy/helm/webhooks): a strict lint; rendered offline (Helm as a library)
with the default values and with every optional part on, each manifest valid by kubernetes-validate
in strict mode; the migration hook, the probes, the grace period, the security contexts; no secret
value in any manifest; the endpoints file in a ConfigMap only when its secrets are env: references;
the alerts of docs/alerts.yml; every value documented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/webhooks"
K8S = "1.30.0"
DEFAULTS = {"existingSecret": "webhooks"}
CONFIG = '[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["env:STRIPE_WEBHOOK_SECRET", "env:STRIPE_OLD"]\n'
EVERYTHING = {
    "existingSecret": "webhooks",
    "config": {"toml": CONFIG},
    "web": {"autoscaling": {"enabled": True}},
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "prometheusRule": {"enabled": True},
    "podAnnotations": {"team": "payments"},
    "extraEnv": [{"name": "WEBHOOKS_LOG_LEVEL", "value": "INFO"}],
    "imagePullSecrets": [{"name": "registry"}],
    "nodeSelector": {"pool": "general"},
}
PASSTHROUGH = {"resources", "podSecurityContext", "securityContext", "labels", "requests", "limits"}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = helm.Chart.load(CHART).render(values, name="hooks", namespace="payments", is_install=True)
    return [
        doc for name, text in sorted(out.items()) if name.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc
    ]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def containers(docs: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Container name → (its pod spec, the container), for every Deployment and Job."""
    found = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            pod = doc["spec"]["template"]["spec"]
            for container in pod["containers"]:
                found[container["name"]] = (pod, container)
    return found


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("values", [DEFAULTS, EVERYTHING], ids=["defaults", "everything"])
def test_the_chart_lints_strictly_and_renders_valid_manifests(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{K8S}")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    docs = render(values)
    kinds = sorted(d["kind"] for d in docs)
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, K8S, strict=True)
        except SchemaNotFoundError:  # prometheus-operator's kinds: their shape is asserted below
            assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] in (
                "ServiceMonitor",
                "PrometheusRule",
            )
    if values is DEFAULTS:
        assert kinds == ["Deployment", "Deployment", "Job", "PodDisruptionBudget", "PodDisruptionBudget", "Service"]
    else:
        assert kinds == ["ConfigMap", "Deployment", "Deployment", "HorizontalPodAutoscaler", "Job", "PodDisruptionBudget",
                         "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceMonitor"]  # fmt: skip


def test_the_migration_runs_first_as_a_hook_and_the_processes_are_the_procfiles() -> None:
    docs = render(DEFAULTS)
    [job] = by_kind(docs, "Job").values()
    hooks = job["metadata"]["annotations"]
    assert hooks["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in hooks["helm.sh/hook-delete-policy"]
    found = containers(docs)
    assert found["migrate"][1]["command"] == ["webhooks", "db", "upgrade", "--wait", "120"]
    procfile = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if ": " in line)
    web = found["web"][1]["command"]
    assert " ".join(web).replace("webhooks:create_app()", '"webhooks:create_app()"') == procfile["web"].replace(
        "${PORT:-8000}", "8000"
    )
    assert found["worker"][1]["command"] == procfile["worker"].split()
    assert procfile["release"] == "webhooks db upgrade"


def test_probes_grace_periods_and_security_contexts() -> None:
    found = containers(render(EVERYTHING))
    web = found["web"][1]
    assert web["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # Readiness is what receiving needs: a web pod stays in service while Redis is down.
    assert web["readinessProbe"]["httpGet"] == {"path": "/readyz/receiving", "port": "http"}
    worker = found["worker"][1]
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert env(worker)["WEBHOOKS_WORKER_PORT"] == str(worker["ports"][0]["containerPort"])
    for pod, container in (found["web"], found["worker"]):
        assert pod["terminationGracePeriodSeconds"] > float(env(container)["WEBHOOKS_STOP_TIMEOUT"])
    for name, (pod, container) in found.items():
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["automountServiceAccountToken"] is False, name
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False, name
        assert context["capabilities"]["drop"] == ["ALL"], name
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name  # the only writable path
        assert "requests" in container["resources"], name


def test_no_secret_value_is_ever_rendered() -> None:
    docs = render(EVERYTHING)
    assert not by_kind(docs, "Secret")
    text = yaml.safe_dump_all(docs)
    for name, (_, container) in containers(docs).items():
        assert container["envFrom"] == [{"secretRef": {"name": "webhooks"}}], name
        literal = [
            k for k in env(container) if re.search(r"SECRET|PASSWORD|TOKEN|ENCRYPTION|DATABASE_URL|REDIS_URL", k)
        ]
        assert literal == [], (name, literal)
    [config] = by_kind(docs, "ConfigMap").values()
    assert config["data"]["webhooks.toml"].strip() == CONFIG.strip()  # env: references only
    assert "whsec_" not in text


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["env:STRIPE_NEW", "whsec_literal"]', "secrets holds a literal secret"),
        ("[endpoints.shop]\nprovider = \"stripe\"\nsecrets = ['whsec_single_quoted']", "secrets holds a literal secret"),
        ('[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["env:S"]\napi_key = "sk_live_x"', "api_key holds a literal secret"),
        ('[destinations.bus]\nkind = "rabbitmq"\nurl = "amqp://user:pw@mq:5672/%2F"', "a URL with user:password@"),
    ],
)  # fmt: skip
def test_an_endpoints_file_with_a_literal_secret_never_becomes_a_config_map(toml: str, words: str) -> None:
    with pytest.raises(helm.HelmError) as caught:
        render({"existingSecret": "webhooks", "config": {"toml": toml}})
    assert words in str(caught.value) and "config.existingSecret" in str(caught.value)
    # The same file from a Secret of the user's own: mounted, never templated.
    docs = render({"existingSecret": "webhooks", "config": {"toml": toml, "existingSecret": "webhooks-file"}})
    assert not by_kind(docs, "ConfigMap")
    web = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-web"))
    volumes = {v["name"]: v for v in web["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["secret"]["secretName"] == "webhooks-file"
    assert "sk_live_x" not in yaml.safe_dump_all(docs) and "whsec_literal" not in yaml.safe_dump_all(docs)


def test_the_secret_is_required() -> None:
    with pytest.raises(helm.HelmError) as caught:
        render({})
    assert "existingSecret" in str(caught.value)


def test_monitoring_scrapes_web_and_worker_pods_with_the_admin_credentials_and_carries_the_alerts() -> None:
    docs = render(EVERYTHING)
    [monitor] = by_kind(docs, "ServiceMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http", "metrics"]
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["path"] == "/metrics"
        assert endpoint["basicAuth"]["password"] == {"name": "webhooks", "key": "WEBHOOKS_ADMIN_PASSWORD"}
    services = by_kind(docs, "Service")
    assert services["hooks-webhooks-worker-metrics"]["spec"]["ports"][0]["name"] == "metrics"
    [rule] = by_kind(docs, "PrometheusRule").values()
    alerts = yaml.safe_load((ROOT / "docs/alerts.yml").read_text())
    assert rule["spec"] == alerts
    assert (CHART / "files/alerts.yml").read_text() == (ROOT / "docs/alerts.yml").read_text()  # the chart's copy


def test_every_value_is_documented() -> None:
    """Each key of values.yaml has a comment line right above it, but inside maps handed to
    Kubernetes as they are (resources, security contexts, labels)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented, parents = [], []
    for number, line in enumerate(lines):
        found = re.match(r"^(\s*)([A-Za-z][\w.-]*):", line)
        if not found:
            continue
        depth = len(found.group(1)) // 2
        parents = [*parents[:depth], found.group(2)]
        if set(parents[:-1]) & PASSTHROUGH:
            continue
        previous = lines[number - 1].strip() if number else ""
        if not previous.startswith("#"):
            undocumented.append(".".join(parents))
    assert undocumented == []
