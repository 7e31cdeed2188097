"""The shipped deployment files hold together: the Kubernetes manifests pass the Kubernetes
schemas (kubernetes-validate ships them) and our own rules, the compose file puts a proxy in
front of gateway replicas on PostgreSQL, and every variable the settings read is documented
in `.env.example` and the README."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from adapters.registry import PLATFORMS
from gateway.config import Settings

ROOT = Path(__file__).parent.parent
DEPLOY = ROOT / "deploy"
KUBERNETES_VERSION = "1.30"
IMAGE_UID = 10001


def manifests() -> list[dict[str, Any]]:
    return [doc for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests() if doc["kind"] == kind]


@pytest.mark.parametrize("doc", manifests(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_passes_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_manifests_ship_an_ingress_with_tls_postgresql_and_no_shared_volume() -> None:
    kinds = {doc["kind"] for doc in manifests()}
    assert {"Deployment", "Service", "Ingress", "StatefulSet"} <= kinds
    [ingress] = by_kind("Ingress")
    [tls] = ingress["spec"]["tls"]
    assert tls["secretName"] and tls["hosts"] == [rule["host"] for rule in ingress["spec"]["rules"]]
    paths = {p["path"] for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]}
    assert paths == {"/slack", "/feishu"}
    claims = [t["spec"] for s in by_kind("StatefulSet") for t in s["spec"].get("volumeClaimTemplates", [])]
    claims += [c["spec"] for c in by_kind("PersistentVolumeClaim")]
    assert claims and all(c["accessModes"] == ["ReadWriteOnce"] for c in claims)
    [postgres] = by_kind("StatefulSet")
    assert postgres["spec"]["template"]["spec"]["containers"][0]["image"].startswith("postgres:")


def test_the_gateway_runs_as_the_images_user_and_keeps_workspaces_in_object_storage() -> None:
    [deployment] = by_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    context = pod["securityContext"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"--uid {IMAGE_UID} --gid {IMAGE_UID}" in dockerfile and f"USER {IMAGE_UID}:{IMAGE_UID}" in dockerfile
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (IMAGE_UID, IMAGE_UID, IMAGE_UID)
    assert context["runAsNonRoot"] is True
    assert all("persistentVolumeClaim" not in volume for volume in pod["volumes"])
    [gateway] = pod["containers"]
    env = {item["name"]: item.get("value") for item in gateway["env"]}
    assert env["BA_WORKSPACE_URL"].startswith("s3://") and env["BA_HOST"] == "0.0.0.0"
    probes = {name: gateway[name]["httpGet"]["path"] for name in ("livenessProbe", "readinessProbe")}
    assert probes == {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    assert deployment["spec"]["replicas"] >= 2


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_puts_a_proxy_in_front_of_two_replicas_on_postgresql() -> None:
    services = compose()["services"]
    gateways = [name for name, service in services.items() if service.get("build", {}).get("dockerfile") == "deploy/Dockerfile"]
    assert len(gateways) == 2
    proxy = services["proxy"]
    assert sorted(proxy["depends_on"]) == sorted(gateways)
    assert all(proxy["depends_on"][g]["condition"] == "service_healthy" for g in gateways)
    assert {p.split(":")[0] for p in proxy["ports"]} == {"80", "443"}
    for name in gateways:
        service = services[name]
        assert "ports" not in service  # reached through the proxy only
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
        env = service["environment"]
        assert env["DATABASE_URL"].startswith("postgresql://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["BA_WORKSPACE_URL"].startswith("s3://") and env["BA_S3_ENDPOINT_URL"] == "http://minio:9000"
        assert service["env_file"] == [{"path": "../.env", "required": False}]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    # Every service another waits on for health has a healthcheck.
    for service in services.values():
        for dependency, condition in service.get("depends_on", {}).items():
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], dependency
    # The proxy forwards to exactly those replicas, on the port they listen on.
    caddyfile = (DEPLOY / "caddy" / "Caddyfile").read_text()
    upstreams = re.search(r"reverse_proxy ([^{]+)\{", caddyfile)
    assert upstreams is not None and upstreams.group(1).split() == [f"{g}:8080" for g in gateways]
    assert "./caddy/Caddyfile:/etc/caddy/Caddyfile:ro" in proxy["volumes"]


def settings_variables() -> list[str]:
    names = [str(field.validation_alias) for field in Settings.model_fields.values()]
    names += [platform.env_name(field) for platform in PLATFORMS for field in platform.settings_class.model_fields]
    assert "BA_WORKSPACE_URL" in names and "FEISHU_CARDS_ENABLED" in names
    return names


def test_every_variable_the_settings_read_is_in_env_example_with_a_comment_and_in_the_readme() -> None:
    lines = (ROOT / ".env.example").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    for name in settings_variables():
        [index] = [i for i, line in enumerate(lines) if re.fullmatch(rf"#? ?{name}=.*", line)]
        while re.fullmatch(r"#? ?[A-Z_]+=.*", lines[index - 1]):  # variables described together
            index -= 1
        assert re.fullmatch(r"# [A-Za-z(].*", lines[index - 1]), name  # a comment says what it is
        assert f"`{name}`" in readme, name
    # The compose file's own variables are there too.
    for name in set(re.findall(r"\$\{([A-Z_]+)", (DEPLOY / "compose.yaml").read_text())):
        assert any(re.fullmatch(rf"#? ?{name}=.*", line) for line in lines), name


def test_the_grafana_dashboard_is_valid_json_with_prometheus_targets() -> None:
    import json

    dashboard = json.loads((DEPLOY / "grafana" / "ba-agent-gateway.json").read_text())
    assert dashboard["panels"] and all(panel["targets"] for panel in dashboard["panels"])
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
