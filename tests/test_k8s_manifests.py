"""deploy/: every manifest validates against the Kubernetes OpenAPI schema of a
pinned version (kubernetes-validate, offline, strict: unknown fields are errors),
and every tally-k8s command line in them parses with tally-k8s's own options."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tally.cli.k8s_main import _parser

KUBERNETES_VERSION = "1.34.0"
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
MANIFESTS = sorted(DEPLOY.rglob("*.yaml"))


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_deployment_is_complete():
    kinds = {(d["kind"], d["metadata"]["name"]) for p in MANIFESTS for d in documents(p)}
    assert {("DaemonSet", "tally"), ("Deployment", "tally-placement"), ("ConfigMap", "tally-health"),
            ("ClusterRole", "tally-node"), ("ClusterRole", "tally-placement"), ("Pod", "bert-serving"),
            ("Pod", "gpt-training")} <= kinds


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_matches_the_schema(path):
    for doc in documents(path):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_catches_a_misspelt_field():
    [ds] = documents(DEPLOY / "daemonset.yaml")
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, KUBERNETES_VERSION, strict=True)


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", spec)
    return pod.get("initContainers", []) + pod.get("containers", [])


def test_tally_k8s_command_lines_parse():
    seen = set()
    for path in MANIFESTS:
        for doc in documents(path):
            for c in _containers(doc):
                command = [a.replace("$(NODE_NAME)", "node-a") for a in c.get("command", [])]
                if command[:1] == ["tally-k8s"]:
                    args = _parser().parse_args(command[1:])
                    seen.add(args.command)
    assert seen == {"install-client", "servers", "device-plugin", "controller"}


def test_health_config_is_toml_with_every_threshold():
    import tomllib
    [cm] = documents(DEPLOY / "health-config.yaml")
    config = tomllib.loads(cm["data"]["health.toml"])
    assert set(config["thresholds"]) == {"gpu_util_percent", "memory_used_percent", "temperature_c",
                                         "power_percent_of_limit", "sm_clock_min_mhz"}
