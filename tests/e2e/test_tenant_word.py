"""The tenant's word checked (docs/design.md, "The tenant's word") on a real kube-apiserver: a
tenant's ServiceAccount, allowed to create Events in its own namespace only, writes Events about
a Pod of another namespace. With ``eventTime`` set (every events.k8s.io/v1 Event has one) the API
server takes them: it checks that an involvedObject's namespace is the Event's only when
``eventTime`` is unset, and ``related`` never. The bridge (under deploy/'s RBAC) publishes them;
from the stream, the OTLP mapping, the alerting labels and the NATS subject say the tenant's
namespace only, mark the reference untrusted, and name none of the victim's Pod, uid or node.
The table of every case is tests/unit/test_tenancy.py; this is the same rule against what a real
API server lets a tenant write."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from k8s_event_consumer.alerting.alerts import Rules, State
from k8s_event_consumer.consuming import Delivery
from k8s_event_consumer.events import decode
from k8s_event_consumer.otlp import mapping
from tests.e2e.test_owners import bridge
from tests.e2e.truth import cloudevent, stream_messages
from tests.integration.harness import eventually
from tests.standins.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

_n = itertools.count(1)
REASON = "BackOff"


def tenant_kubeconfig(cp: ControlPlane, ns: str) -> Path:
    """A ServiceAccount of ``ns`` that may create Events there and nothing else."""
    cp.kubectl("create", "serviceaccount", "tenant", "-n", ns)
    cp.kubectl(
        "create", "role", "events-writer", "-n", ns,
        "--verb=create", "--resource=events,events.events.k8s.io",
    )  # fmt: skip
    cp.kubectl(
        "create", "rolebinding", "events-writer", "-n", ns,
        "--role=events-writer", f"--serviceaccount={ns}:tenant",
    )  # fmt: skip
    return cp.service_account_kubeconfig(ns, "tenant")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return [] if value is None else [str(value)]


@pytest.mark.timeout(300)
async def test_a_tenants_event_about_another_namespaces_pod_speaks_only_for_the_tenant(
    control_plane: ControlPlane, nats_server: Any, tmp_path: Path
) -> None:
    cp = control_plane
    k = next(_n)
    tenant, victim = f"tenant-{k}", f"victim-{k}"
    for ns in (tenant, victim):
        cp.kubectl("create", "namespace", ns)
    victim_pod = json.loads(
        cp.kubectl(
            "run",
            "payments-db-0",
            "-n",
            victim,
            "--image=registry.invalid/db:1",
            "--restart=Never",
            "-o",
            "json",
        ).stdout
    )
    victim_uid = victim_pod["metadata"]["uid"]
    victim_node = "victim-node-7"
    ref = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": victim,
        "name": "payments-db-0",
        "uid": victim_uid,
    }
    as_tenant = tenant_kubeconfig(cp, tenant)
    # without eventTime the API server refuses it (the one place it checks); with it, takes it
    refused = cp.kubectl(
        "create", "-f", "-", "-n", tenant, kubeconfig=as_tenant, check=False,
        input=json.dumps({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "plain", "namespace": tenant},
            "involvedObject": ref, "reason": REASON, "message": "m", "type": "Warning",
        }),
    )  # fmt: skip
    assert refused.returncode != 0 and "does not match event" in refused.stderr, refused.stderr
    written = [
        {  # core/v1 with eventTime, and the node of the tenant's choosing
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"forged-core-{k}", "namespace": tenant},
            "involvedObject": {**ref, "fieldPath": "spec.containers{db}"},
            "reason": REASON,
            "message": "Back-off restarting failed container db",
            "type": "Warning",
            "eventTime": _now(),
            "action": "Restarting",
            "reportingComponent": "kubelet",
            "reportingInstance": victim_node,
            "source": {"component": "kubelet", "host": victim_node},
        },
        {  # events.k8s.io/v1: regarding in the victim's namespace
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"forged-new-{k}", "namespace": tenant},
            "regarding": ref,
            "reason": REASON,
            "note": "Back-off restarting failed container db",
            "type": "Warning",
            "eventTime": _now(),
            "action": "Restarting",
            "reportingController": "kubelet",
            "reportingInstance": victim_node,
        },
    ]
    for ev in written:
        cp.kubectl("create", "-f", "-", "-n", tenant, kubeconfig=as_tenant, input=json.dumps(ev))

    br = bridge(
        cp,
        tmp_path,
        nats_server.url,
        cp.deployed_bridge_kubeconfig(),
        filter={"namespaces": [tenant], "reasons": [REASON]},
    )
    try:
        await br.wait_ready(timeout=60)

        async def both() -> list[tuple[str, dict[str, str], bytes]]:
            msgs = [m for m in await stream_messages(nats_server.url) if f".{tenant}." in m[0]]
            return msgs if len(msgs) >= len(written) else []

        msgs = await eventually(both, timeout=90, interval=0.5)
    finally:
        br.kill()

    assert len(msgs) == len(written)
    secrets = (victim, "payments-db-0", victim_uid, victim_node)
    for subject, headers, body in msgs:
        # the bridge: its subject and CloudEvent say the tenant's namespace, mark the reference
        assert subject.split(".")[3] == tenant, subject  # k8s.events.<cluster>.<ns>.<kind>.<reason>
        decoded = decode(subject, headers, body)
        ev = decoded.event
        assert ev is not None
        assert ev.namespace == tenant
        ce, _ = cloudevent(subject, headers, body)
        assert ce["k8snamespace"] == tenant
        assert ce["k8suntrusted"] == "object:other_namespace", ce
        assert ce["subject"] == "Pod/" and not ce.get("k8sname")
        # the OTLP record and the alert
        d = Delivery(decoded, 1, 1, None, headers, body)
        m = mapping.mapped(d)
        resource = dict(m.resource)
        record = {kv.key: kv.value for kv in m.record.attributes}
        assert resource["k8s.namespace.name"] == tenant
        assert not [key for key in resource if key.startswith(("k8s.pod.", "k8s.node."))]
        assert "k8s_event_bridge.untrusted" in record
        (alert,) = State(Rules()).event(ev)
        assert alert.labels["namespace"] == tenant
        assert alert.labels["untrusted"] == "object:other_namespace"
        assert not alert.labels.get("name")
        # none of the victim's: its namespace, Pod, uid anywhere; the node the tenant named in
        # its own Event's source stays its word (reportingInstance), never a node attribute
        outputs = [subject, ce, resource, str(record), alert.labels, alert.annotations]
        leaked = [s for s in _strings(outputs) for x in secrets[:3] if x in s]
        assert leaked == [], leaked
        named = [s for s in _strings([subject, resource, alert.labels]) if victim_node in s]
        assert named == [], named
