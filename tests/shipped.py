"""The subscribers' configs as deploy/consumers/ ships them (each program's ConfigMap), pointed
at a test's servers: what an attack on a real process runs with, so that what it proves holds
for the shipped settings (timeouts, batches, limits), not for a test's own.

    path = subscriber(tmp_path, "k8s_event_consumer.remediation", nats_url, kubeconfig=kc)

Only where it connects changes: NATS (its user kept: a server without auth ignores it), the
HTTP port (on loopback), the API server and the cluster's name in the subjects (the remediation
worker), Alertmanager, the OTLP endpoint; the alerting pair's durable and the digests' pair's
consumer are the first replica's, as their StatefulSets' environment names them. ``sections``
override per key last.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from k8s_event_sim.configs import deep_merge
from k8s_event_sim.natsserver import free_port

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "test"  # k8s_event_sim.configs.bridge_config's cluster.name


def _kinds(program: str) -> dict[str, dict[str, Any]]:
    """deploy/consumers/<program>.yaml's objects by kind."""
    docs = yaml.safe_load_all((REPO / "deploy" / "consumers" / f"{program}.yaml").read_text())
    return {d["kind"]: d for d in docs if d}


def _chart(program: str) -> dict[str, Any]:
    values = yaml.safe_load((REPO / "deploy/helm/k8s-event-bridge/values.yaml").read_text())
    section: dict[str, Any] = values[program]
    return section


def config_text(program: str, chart: bool = False) -> str:
    """``program``'s config (``alerting``, ``remediation``, ``otlp``) as deploy/consumers/
    ships it in its ConfigMap, or (``chart``) as the chart's values hold it."""
    if chart:
        return str(yaml.safe_dump(_chart(program)["config"]))
    return str(_kinds(program)["ConfigMap"]["data"][f"{program}.yaml"])


def shipped(module: str) -> dict[str, Any]:
    """The config of ``module`` (``k8s_event_consumer.alerting``, ``.remediation``, ``.otlp``)
    in its ConfigMap of deploy/consumers/."""
    config: dict[str, Any] = yaml.safe_load(config_text(module.rsplit(".", 1)[1]))
    return config


def resources(program: str, chart: bool = False) -> dict[str, dict[str, str]]:
    """``program``'s container resources in deploy/consumers/ (its Deployment or StatefulSet)
    or the chart's values."""
    if chart:
        chart_resources: dict[str, dict[str, str]] = _chart(program)["resources"]
        return chart_resources
    kinds = _kinds(program)
    workload = kinds.get("Deployment") or kinds["StatefulSet"]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    found: dict[str, dict[str, str]] = container["resources"]
    return found


def quantity(text: str) -> int:
    """A Kubernetes memory quantity (``256Mi``) in bytes."""
    for unit, factor in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30)):
        if text.endswith(unit):
            return int(text[: -len(unit)]) * factor
    return int(text)


def memory(program: str, chart: bool = False) -> tuple[int, int]:
    """``program``'s shipped memory (request, limit) in bytes."""
    res = resources(program, chart)
    return quantity(res["requests"]["memory"]), quantity(res["limits"]["memory"])


def subscriber(
    directory: Path,
    module: str,
    nats_url: str,
    *,
    kubeconfig: Path | None = None,
    alertmanager: str | None = None,
    otlp_endpoint: str | None = None,
    **sections: Any,
) -> Path:
    """``module``'s shipped config connected to ``nats_url`` (and the API server of
    ``kubeconfig``, ``alertmanager``, ``otlp_endpoint``: a closed port will do where the test
    needs no answer), its HTTP port a free one on loopback; written in ``directory``."""
    cfg = shipped(module)
    over: dict[str, Any] = {
        "nats": {"servers": [nats_url]},
        "http": {"host": "127.0.0.1", "port": free_port()},
    }
    if "kubernetes" in cfg:
        theirs = cfg["kubernetes"]["cluster"]
        over["kubernetes"] = {"cluster": CLUSTER, "kubeconfig": str(kubeconfig)}
        over["nats"]["subjects"] = [
            s.replace(f".{theirs}.", f".{CLUSTER}.") for s in cfg["nats"]["subjects"]
        ]
    if "alertmanager" in cfg:
        over["alertmanager"] = {"urls": [alertmanager or f"http://127.0.0.1:{free_port()}"]}
        over["nats"]["durable"] = "k8s-event-alerting-0"  # ALERTING_NATS__DURABLE, replica 0
    if module == "k8s_event_consumer.digests":
        over["nats"]["durable"] = "k8s-event-digests-0"  # DIGESTS_NATS__DURABLE, replica 0
    if "otlp" in cfg:
        over["otlp"] = {"endpoint": otlp_endpoint or f"http://127.0.0.1:{free_port()}"}
    cfg = deep_merge(deep_merge(cfg, over), sections)
    program = module.rsplit(".", 1)[1]
    path = directory / f"{program}-{random.randrange(1 << 30)}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
