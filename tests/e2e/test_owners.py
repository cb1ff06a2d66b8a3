"""Ownership proven from the owner's side (issue 31), on a real kube-apiserver with the shipped
RBAC and admission policy, a real nats-server, the bridge and the remediation worker as real
processes.

A tenant who may create Pods writes their ownerReferences: a Pod may name any Deployment of its
namespace as its controller, with its real uid, or a ``Deployment`` of another API group. The
remediation worker and the enricher count a controller only when the owner itself claims the
child (``k8s_event_common.owners.walk``).

This control plane runs no controller-manager: the ReplicaSets and Pods are created with the
labels, selectors and ownerReferences the real controllers write, and the Pods' status (the
kubelet's part) is patched in.
"""

from __future__ import annotations

import collections
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.access import cluster_role
from bridge.settings import load
from k8s_event_consumer.remediation.rules import annotation_key, suggest
from k8s_event_consumer.remediation.settings import MemorySettings
from tests.cloudevent_expected import CLUSTER
from tests.e2e.test_enrichment import grant_enrichment
from tests.e2e.test_subscribers import metric, remediation_config, worker_kubeconfig
from tests.e2e.truth import stream_events
from tests.integration.harness import BridgeProcess, ConsumerProcess, bridge_config, eventually
from tests.standins.controlplane import BRIDGE_NAMESPACE, ControlPlane

pytestmark = pytest.mark.e2e

_n = itertools.count(1)
LONG_CONTAINER = "memory-hungry-" + "x" * 48 + "1"  # 63 characters: the longest name there is
assert len(LONG_CONTAINER) == 63


# ----------------------------------------------------------------------------- the cluster


def apply(cp: ControlPlane, obj: dict[str, Any]) -> dict[str, Any]:
    out = cp.kubectl("apply", "-o", "json", "-f", "-", input=json.dumps(obj)).stdout
    return json.loads(out)


def get(cp: ControlPlane, kind: str, name: str, ns: str) -> dict[str, Any]:
    return json.loads(cp.kubectl("get", kind, name, "-n", ns, "-o", "json").stdout)


def controller(kind: str, name: str, uid: str, api_version: str = "apps/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def container(name: str = "app", memory: str = "4Mi") -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.invalid/app:1",
        "resources": {"limits": {"memory": memory}},
    }


def deployment(cp: ControlPlane, ns: str, name: str, containers: list[Any]) -> dict[str, Any]:
    return apply(
        cp,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": containers},
                },
            },
        },
    )


def replicaset(cp: ControlPlane, ns: str, dep: dict[str, Any], hash_: str) -> dict[str, Any]:
    """The ReplicaSet the Deployment controller would make: its labels and selector with the
    pod-template-hash, owned by the Deployment."""
    name = dep["metadata"]["name"]
    labels = {"app": name, "pod-template-hash": hash_}
    template = dep["spec"]["template"]
    return apply(
        cp,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name}-{hash_}",
                "namespace": ns,
                "labels": labels,
                "ownerReferences": [controller("Deployment", name, dep["metadata"]["uid"])],
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {**template, "metadata": {"labels": labels}},
            },
        },
    )


def pod(
    cp: ControlPlane,
    ns: str,
    name: str,
    labels: dict[str, str],
    owner: dict[str, Any],
    containers: list[Any],
) -> dict[str, Any]:
    return apply(
        cp,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": {"containers": containers},
        },
    )


def set_status(cp: ControlPlane, ns: str, name: str, containers: list[str], *, oom: bool) -> None:
    """What the kubelet reports: each container last terminated OOMKilled, or waiting in
    CrashLoopBackOff with 5 restarts."""
    statuses = []
    for c in containers:
        st: dict[str, Any] = {
            "name": c,
            "image": "registry.invalid/app:1",
            "imageID": "",
            "ready": False,
            "restartCount": 5,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        }
        if oom:
            st["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
        statuses.append(st)
    cp.kubectl(
        "patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"containerStatuses": statuses}}),
    )  # fmt: skip


def event(
    cp: ControlPlane,
    ns: str,
    reason: str,
    involved: dict[str, Any],
    *,
    count: int = 5,
    name: str | None = None,
) -> dict[str, Any]:
    """A Warning Event written with the admin identity (as the kubelet would write it)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return apply(
        cp,
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name or f"{involved['name']}.{reason.lower()}{next(_n)}",
                "namespace": ns,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": f"{reason} of {involved['name']}",
            "type": "Warning",
            "count": count,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": "kubelet", "host": "node-1"},
        },
    )


def about(obj: dict[str, Any], *, uid: bool = True) -> dict[str, Any]:
    m = obj["metadata"]
    out = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": m["name"],
    }
    if m.get("namespace"):
        out["namespace"] = m["namespace"]
    if uid:
        out["uid"] = m["uid"]
    return out


def bridge(cp: ControlPlane, tmp_path: Path, nats_url: str, kubeconfig: Path, **sections: Any):
    cfg = bridge_config(
        tmp_path,
        nats_url,
        kubeconfig,
        cluster={"name": CLUSTER},
        kubernetes={"read_timeout": "90s"},
        **sections,
    )
    return BridgeProcess(cfg, tmp_path / f"bridge-{next(_n)}.log").start()


# ----------------------------------------------------------------------------- remediation


@pytest.mark.timeout(300)
async def test_a_pod_naming_an_unrelated_deployment_never_gets_it_annotated(
    control_plane: ControlPlane, nats_server: Any, tmp_path: Path
) -> None:
    """A tenant's Pods whose controller ownerReference names the unrelated Deployment
    ``payments-api`` (its real uid; the same kind in ``evil.example.com/v1``), OOMKilled with a
    4Mi limit, and one crash-looping: ``payments-api`` gets no annotation and the crash-looping
    one is not deleted; each is refused ``owner_unproven``, counted and logged with the walk's
    why. The genuine ones, a Pod of the real Deployment ``web`` (through its ReplicaSet): the
    OOMKilled one's 63-character container gets its suggestion on ``web`` (a valid key: the API
    server takes it), the crash-looping one is deleted, its owner found."""
    cp = control_plane
    ns = f"owners-{next(_n)}"
    cp.kubectl("create", "namespace", ns)
    worker_cfg = worker_kubeconfig(cp, ns)
    payments = deployment(cp, ns, "payments-api", [container()])
    pay_uid = payments["metadata"]["uid"]
    web = deployment(cp, ns, "web", [container(LONG_CONTAINER)])
    rs = replicaset(cp, ns, web, "5f6d8")
    rs_labels = rs["metadata"]["labels"]
    rs_ref = controller("ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"])
    forged_ref = controller("Deployment", "payments-api", pay_uid)
    evil_ref = controller("Deployment", "payments-api", pay_uid, "evil.example.com/v1")
    # the tenant copies payments-api's labels too: a Deployment still makes no Pod
    tenant_labels = {"app": "payments-api"}
    pods = {
        "forged-oom": pod(cp, ns, "forged-oom", tenant_labels, forged_ref, [container()]),
        "evil-oom": pod(cp, ns, "evil-oom", tenant_labels, evil_ref, [container()]),
        "forged-loop": pod(cp, ns, "forged-loop", tenant_labels, forged_ref, [container()]),
        "web-oom": pod(cp, ns, "web-5f6d8-a", rs_labels, rs_ref, [container(LONG_CONTAINER)]),
        "web-loop": pod(cp, ns, "web-5f6d8-b", rs_labels, rs_ref, [container(LONG_CONTAINER)]),
    }
    for key, p in pods.items():
        names = [c["name"] for c in p["spec"]["containers"]]
        set_status(cp, ns, p["metadata"]["name"], names, oom=key.endswith("oom"))
    br = bridge(
        cp, tmp_path, nats_server.url, cp.deployed_bridge_kubeconfig(), filter={"namespaces": [ns]}
    )
    worker = ConsumerProcess(
        remediation_config(tmp_path, nats_server.url, worker_cfg), tmp_path / "remediation.log"
    )
    try:
        await br.wait_ready(timeout=60)  # its stream is there: the worker's consumer can be made
        worker.start()
        await worker.wait_ready(timeout=60)
        for key, p in pods.items():
            event(cp, ns, "OOMKilling" if key.endswith("oom") else "BackOff", about(p))

        def refused() -> list[dict[str, Any]]:
            return [u for u in worker.log_events("untrusted") if u["why"] == "owner_unproven"]

        def acted() -> list[dict[str, Any]]:
            return worker.log_events("acted")

        async def judged() -> bool:
            assert worker.running(), worker.logs()[-3000:]
            return len(refused()) >= 3 and len(acted()) >= 2

        await eventually(judged, timeout=120, interval=0.5)
        counted = {
            why: await metric(worker, f'k8s_event_remediation_owner_unproven_total{{why="{why}"}}')
            for why in ("unclaimed", "group")
        }
        untrusted = await metric(
            worker, 'k8s_event_remediation_untrusted_total{why="owner_unproven"}'
        )
    finally:
        worker.kill()
        br.kill()

    # the attack: payments-api untouched, the tenant's crash-looping Pod still there
    annotations = get(cp, "deployment", "payments-api", ns)["metadata"].get("annotations") or {}
    assert not [k for k in annotations if k.startswith("remediation.")], annotations
    assert (
        get(cp, "pod", "forged-loop", ns)["metadata"]["uid"]
        == pods["forged-loop"]["metadata"]["uid"]
    )
    proofs = collections.Counter(u["proof"] for u in refused())
    assert proofs["unclaimed"] >= 2 and proofs["group"] >= 1, proofs
    assert all("payments-api" in u["detail"] for u in refused())
    assert counted["unclaimed"] >= 2 and counted["group"] >= 1 and untrusted >= 3
    # the genuine ones: web annotated under a valid key, the looping Pod deleted, owner found
    key = annotation_key(MemorySettings().annotation, LONG_CONTAINER)
    assert len(key.split("/")[1]) <= 63
    web_after = get(cp, "deployment", "web", ns)["metadata"].get("annotations") or {}
    assert web_after.get(key) == suggest("4Mi", 1.5) == "6Mi", web_after
    by_action = {a["action"]: a for a in acted()}
    assert by_action["suggest_memory"]["target"] == f"Deployment/{ns}/web"
    deleted = by_action["delete_pod"]
    assert deleted["uid"] == pods["web-loop"]["metadata"]["uid"]
    assert deleted["owner"] == f"Deployment/{ns}/web"
    assert cp.kubectl("get", "pod", "web-5f6d8-b", "-n", ns, check=False).returncode != 0
    cp.kubectl("delete", "namespace", ns, "--wait=false")


# ----------------------------------------------------------------------------- enrichment


@pytest.mark.timeout(300)
async def test_the_enricher_publishes_only_owners_that_claim_the_object(
    control_plane: ControlPlane, nats_server: Any, tmp_path: Path
) -> None:
    """The bridge with enrichment, under deploy/'s RBAC, that of deploy/components/enrich and
    ``check-config --rbac``'s for Nodes. Events about: a Pod of the real Deployment ``web``
    (owner Deployment web, complete); Pods whose controller reference names ``payments-api``
    with its real uid, or ``evil.example.com/v1 Deployment payments-api`` (never owner
    payments-api; ``owner:unproven``, partial); the genuine Pod without the involvedObject's uid
    (none of its values, ``object:nouid``); a Node, from the tenant's namespace (none of its
    values, ``object:scope``) and from ``default`` (its values)."""
    cp = control_plane
    ns = f"owners-{next(_n)}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("label", "namespace", ns, "team=shop")
    kubeconfig = grant_enrichment(cp)
    enrich = {
        "namespace": {"labels": {"team": "team"}},
        "object": {
            "labels": {"app": "app"},
            "owner_kind": "ownerkind",
            "owner_name": "ownername",
            "kinds": ["Pod", "ReplicaSet", "Deployment", "Node"],
        },
        "lookup_timeout": "20s",
    }
    node = apply(
        cp,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"owners-node-{next(_n)}", "labels": {"app": "node-pool-a"}},
        },
    )
    payments = deployment(cp, ns, "payments-api", [container()])
    pay_uid = payments["metadata"]["uid"]
    web = deployment(cp, ns, "web", [container()])
    rs = replicaset(cp, ns, web, "5f6d8")
    rs_ref = controller("ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"])
    genuine = pod(cp, ns, "web-5f6d8-a", rs["metadata"]["labels"], rs_ref, [container()])
    labels = {"app": "payments-api"}
    forged = pod(
        cp, ns, "forged", labels, controller("Deployment", "payments-api", pay_uid), [container()]
    )
    evil = pod(
        cp,
        ns,
        "evil",
        labels,
        controller("Deployment", "payments-api", pay_uid, "evil.example.com/v1"),
        [container()],
    )
    br = bridge(
        cp,
        tmp_path,
        nats_server.url,
        kubeconfig,
        filter={"namespaces": [ns, "default"]},
        enrich=enrich,
    )
    # the Node's get, as `check-config --rbac` prints it for this configuration
    role = cluster_role(load(str(br.config)), name="k8s-event-bridge-owners-e2e")
    cp.kubectl("apply", "-f", "-", input=json.dumps(role))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "k8s-event-bridge-owners-e2e"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "k8s-event-bridge-owners-e2e",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": "k8s-event-bridge", "namespace": BRIDGE_NAMESPACE}
        ],
    }
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
    try:
        await br.wait_ready(timeout=60)
        written = {
            "genuine": event(cp, ns, "BackOff", about(genuine)),
            "forged": event(cp, ns, "BackOff", about(forged)),
            "evil": event(cp, ns, "BackOff", about(evil)),
            "nouid": event(cp, ns, "BackOff", about(genuine, uid=False)),
            # the API server keeps an Event about a cluster-scoped object in `default` unless
            # its involvedObject names a namespace: the tenant names its own
            "node-tenant": event(cp, ns, "NodeNotReady", {**about(node), "namespace": ns}),
            "node-default": event(cp, "default", "NodeNotReady", about(node)),
        }
        names = {e["metadata"]["name"]: k for k, e in written.items()}

        async def published() -> dict[str, dict[str, Any]]:
            got = {}
            for attrs, data in await stream_events(nats_server.url):
                k = names.get(data["metadata"]["name"])
                if k is not None:
                    got[k] = attrs
            return got

        got: dict[str, dict[str, Any]] = {}

        async def all_published() -> bool:
            assert br.running(), br.logs()[-3000:]
            got.update(await published())
            return set(got) == set(written)

        await eventually(all_published, timeout=90, interval=0.5)
        unproven = await br.metric("enrich_missing", 'why="unproven"')
    finally:
        br.kill()
        cp.kubectl("delete", "clusterrolebinding", "k8s-event-bridge-owners-e2e", check=False)
        cp.kubectl("delete", "clusterrole", "k8s-event-bridge-owners-e2e", check=False)
        cp.kubectl("delete", "node", node["metadata"]["name"], check=False)

    def enrichment(k: str) -> dict[str, Any]:
        keys = ("team", "app", "ownerkind", "ownername", "k8senriched", "k8senrichmissing")
        return {x: got[k][x] for x in keys if x in got[k]}

    print(json.dumps({k: enrichment(k) for k in sorted(got)}, indent=1))
    assert enrichment("genuine") == {
        "team": "shop",
        "app": "web",
        "ownerkind": "Deployment",
        "ownername": "web",
        "k8senriched": "complete",
    }
    for k, name in (("forged", "forged"), ("evil", "evil")):
        assert enrichment(k) == {
            "team": "shop",
            "app": "payments-api",  # its own label, as the tenant wrote it
            "ownerkind": "Pod",  # the last object proven: itself
            "ownername": name,
            "k8senriched": "partial",
            "k8senrichmissing": "owner:unproven",
        }, k
    assert enrichment("nouid") == {
        "team": "shop",
        "k8senriched": "partial",
        "k8senrichmissing": "object:nouid",
    }
    assert enrichment("node-tenant") == {
        "team": "shop",
        "k8senriched": "partial",
        "k8senrichmissing": "object:scope",
    }
    node_default = enrichment("node-default")
    assert node_default["app"] == "node-pool-a" and node_default["ownerkind"] == "Node"
    assert "object:" not in node_default.get("k8senrichmissing", "")
    assert unproven >= 2
    logged = {u["why"] for u in br.log_events("owner_unproven")}
    assert {"unclaimed", "group"} <= logged, br.log_events("owner_unproven")
    cp.kubectl("delete", "namespace", ns, "--wait=false")
