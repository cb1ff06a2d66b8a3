"""The subscribers' configs as deploy/consumers/ ships them (each program's ConfigMap), pointed
at a test's servers: what an attack on a real process runs with, so that what it proves holds
for the shipped settings (timeouts, batches, limits), not for a test's own.

    path = subscriber(tmp_path, "k8s_event_consumer.remediation", nats_url, kubeconfig=kc)

Only where it connects changes: NATS (its user kept: a server without auth ignores it), the
HTTP port (on loopback), the API server and the cluster's name in the subjects (the remediation
worker), Alertmanager, the OTLP endpoint; the alerting pair's durable is the first replica's,
as its StatefulSet's environment names it. ``sections`` override per key last.
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


def shipped(module: str) -> dict[str, Any]:
    """The config of ``module`` (``k8s_event_consumer.alerting``, ``.remediation``, ``.otlp``)
    in its ConfigMap of deploy/consumers/."""
    program = module.rsplit(".", 1)[1]
    for doc in yaml.safe_load_all((REPO / "deploy" / "consumers" / f"{program}.yaml").read_text()):
        if doc and doc.get("kind") == "ConfigMap":
            config: dict[str, Any] = yaml.safe_load(doc["data"][f"{program}.yaml"])
            return config
    raise LookupError(f"deploy/consumers/{program}.yaml has no ConfigMap")


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
    if "otlp" in cfg:
        over["otlp"] = {"endpoint": otlp_endpoint or f"http://127.0.0.1:{free_port()}"}
    cfg = deep_merge(deep_merge(cfg, over), sections)
    program = module.rsplit(".", 1)[1]
    path = directory / f"{program}-{random.randrange(1 << 30)}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
