"""The subscribers the stream exists for, on a living cluster (cluster.py), each Kubernetes
version of the tier — the seeds' pattern as an operator runs it: Events written by kwok's
kubelets and the controllers -> the bridge -> JetStream -> the alerting subscriber's alerts in
a real Alertmanager, and the remediation worker's actions on the real API server (under
deploy/consumers/'s RBAC), with the control plane taken down and brought back while the
worker has work in hand: no alert missing or doubled, no action lost or done twice.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from bridge.core.converting import Converter
from k8s_event_consumer import KubeEvent, Start, replay
from k8s_event_consumer.remediation.kube import Conflict, Kube, NotFound, Refused, Unavailable
from k8s_event_consumer.remediation.settings import KubernetesSettings
from k8s_event_sim.natsserver import free_port
from k8s_event_sim.waiting import NotMet
from tests.cloudevent_expected import CLUSTER
from tests.integration.harness import (
    BridgeProcess,
    ConsumerProcess,
    bridge_config,
    eventually,
    status_events,
)
from tests.standins.alertmanager import Alertmanager, Webhook
from tests.standins.cluster import CRASHLOOP_LABEL, LivingCluster, deployment
from tests.standins.controlplane import BRIDGE_NAMESPACE, REPO, ControlPlane

pytestmark = pytest.mark.e2e

MIN_COUNT = 3  # the worker deletes a Pod whose BackOff count reached this
SUGGESTION_KEY = "remediation.k8s-event-bridge.io/suggested-memory-limit.app"
_ns = itertools.count(1)


async def stream_events(nats_url: str) -> list[KubeEvent]:
    """Every Kubernetes Event in the stream, decoded by the consumer kit."""
    nc = await nats.connect(nats_url)
    try:
        return [
            d.decoded.event
            async for d in replay(nc, stream="K8S_EVENTS", start=Start.all())
            if d.decoded.event is not None
        ]
    finally:
        await nc.close()


def crash_deployment(name: str, namespace: str, replicas: int, reason: str = "Error") -> Any:
    labels = {CRASHLOOP_LABEL: "true", f"{CRASHLOOP_LABEL}/reason": reason}
    d = deployment(name, namespace, replicas, labels=labels)
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"memory": "128Mi"}
    return d


def remediation_config(tmp: Path, nats_url: str, kubeconfig: Path, **remediation: Any) -> Path:
    cfg = {
        "kubernetes": {"cluster": CLUSTER, "kubeconfig": str(kubeconfig), "request_timeout": "3s"},
        "nats": {
            "servers": [nats_url],
            "subjects": [f"k8s.events.{CLUSTER}.*.Pod.>"],
            "ack_wait": "10s",
        },
        "remediation": {
            "dry_run": False,
            "hold": "2s",
            "rate_limit": "1s",
            "restart": {"min_count": MIN_COUNT},
            **remediation,
        },
        "http": {"host": "127.0.0.1", "port": free_port()},
    }
    path = tmp / "remediation.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def metric(process: ConsumerProcess, line: str) -> float:
    """The value of one sample of its /metrics (``name{labels}`` as written), 0 if absent."""
    _, text = await process.get("/metrics")
    for ln in text.splitlines():
        if ln.startswith(line + " "):
            return float(ln.rsplit(" ", 1)[1])
    return 0.0


def record_events(cluster: LivingCluster, namespace: str) -> list[dict[str, Any]]:
    items = cluster.get_json("events", "-n", namespace)["items"]
    return [e for e in items if e["reason"].startswith("Remediation")]


async def start_bridge(tmp_path: Path, nats_url: str, cluster: LivingCluster) -> BridgeProcess:
    kubeconfig = cluster.deployed_bridge_kubeconfig()
    cfg = bridge_config(
        tmp_path,
        nats_url,
        kubeconfig,
        cluster={"name": CLUSTER},
        filter={"reasons": ["BackOff"]},
        kubernetes={"read_timeout": "90s"},
    )
    bridge = BridgeProcess(cfg, tmp_path / "bridge.log").start()
    await bridge.wait_ready(timeout=60)
    return bridge


CONSUMERS = REPO / "deploy" / "consumers"


def worker_kubeconfig(cluster: ControlPlane, *namespaces: str) -> Path:
    """deploy/consumers/remediation-rbac.yaml and remediation-policy.yaml applied, the
    worker allowed in ``namespaces`` as an operator does it (the file's RoleBinding, one per
    namespace); a token for its ServiceAccount."""
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(CONSUMERS / "remediation-rbac.yaml"))
    cluster.kubectl("apply", "-f", str(CONSUMERS / "remediation-policy.yaml"))
    allow_worker_in(cluster, *namespaces)
    return cluster.service_account_kubeconfig(BRIDGE_NAMESPACE, "k8s-event-remediation")


def allow_worker_in(cluster: ControlPlane, *namespaces: str) -> None:
    docs = list(yaml.safe_load_all((CONSUMERS / "remediation-rbac.yaml").read_text()))
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    for ns in namespaces:
        binding["metadata"]["namespace"] = ns
        cluster.kubectl("apply", "-f", "-", input=json.dumps(binding))


def alerting_config(tmp: Path, nats_url: str, am: Alertmanager) -> Path:
    cfg = {
        "nats": {"servers": [nats_url], "ack_wait": "10s"},
        "alertmanager": {"urls": [am.url], "timeout": "2s", "hold": "1s"},
        "alerts": {"reasons": ["BackOff"], "resolve_after": "10m", "resend_interval": "2s"},
        "http": {"host": "127.0.0.1", "port": free_port()},
    }
    path = tmp / "alerting.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def consumer_idle(nats_url: str, durable: str) -> bool:
    nc = await nats.connect(nats_url)
    try:
        info = await nc.jetstream().consumer_info("K8S_EVENTS", durable)
    finally:
        await nc.close()
    return info.num_pending == 0 and info.num_ack_pending == 0


@pytest.mark.timeout(480)
async def test_alerts_and_remediation_work_through_a_control_plane_outage(
    own_living_cluster: LivingCluster, nats_server: Any, tmp_path: Path
) -> None:
    """Three Pods crash-loop (two with Error, one OOMKilled with a 128Mi limit) until each
    BackOff count reached MIN_COUNT in the stream, the alerting subscriber turning each into
    one Alertmanager alert; then the kube-apiserver stops: the bridge says so and the
    control-plane alert fires; the remediation worker (restarted, say) starts with that
    backlog, can act on nothing and holds each message (nak with delay) for as long as the
    API server is away. When it is back the control-plane alert resolves and each action is
    done once: the two Pods deleted (their ReplicaSet makes new ones, which crash and are
    deleted in turn), the OOMKilled one's Deployment annotated with 192Mi, each recorded as
    an Event of its own. At the end Alertmanager holds exactly one alert per Pod and reason
    the stream carries, with the newest count, each notified once."""
    cluster = own_living_cluster
    webhook = await Webhook().start()
    am = await Alertmanager(tmp_path / "alertmanager", webhook.url).start()
    bridge = await start_bridge(tmp_path, nats_server.url, cluster)
    alerting = ConsumerProcess(
        alerting_config(tmp_path, nats_server.url, am),
        tmp_path / "alerting.log",
        module="k8s_event_consumer.alerting",
    ).start()
    try:
        await seeds_pattern(cluster, nats_server.url, tmp_path, bridge, am, webhook, alerting)
    finally:
        alerting.kill()
        bridge.kill()
        am.stop()
        await webhook.stop()


async def seeds_pattern(
    cluster: LivingCluster,
    nats_url: str,
    tmp_path: Path,
    bridge: BridgeProcess,
    am: Alertmanager,
    webhook: Webhook,
    alerting: ConsumerProcess,
) -> None:
    ns = cluster.create_namespace(f"subscribers-{next(_ns)}")
    kubeconfig = worker_kubeconfig(cluster, ns)
    cluster.apply(crash_deployment("crash", ns, 2))
    cluster.apply(crash_deployment("oom", ns, 1, reason="OOMKilled"))

    def reached() -> dict[str, KubeEvent]:
        return {e.involved.uid: e for e in events if e.reason == "BackOff" and e.count >= MIN_COUNT}

    events: list[KubeEvent] = []

    async def backlog() -> bool:
        events[:] = await stream_events(nats_url)
        return len(reached()) >= 3

    await eventually(backlog, timeout=120, interval=1)
    first = {e.involved.uid: e.involved.name for e in reached().values()}
    crash_uids = {uid for uid, name in first.items() if name.startswith("crash-")}
    assert len(crash_uids) == 2 and len(first) == 3, first

    async def alerted() -> bool:
        shown = await am.alerts(filters=['alertname="KubernetesWarningEvent"', f'namespace="{ns}"'])
        return {a["labels"]["name"] for a in shown} >= set(first.values())

    await eventually(alerted, timeout=60, interval=0.5)

    cluster.stop_apiserver()
    await eventually(
        lambda: status_events(nats_url, "apiserver_unreachable"), timeout=60, interval=1
    )

    async def control_plane_alert() -> list[dict[str, Any]]:
        return await am.alerts(filters=['alertname="KubernetesControlPlaneUnreachable"'])

    (down,) = await eventually(control_plane_alert, timeout=30, interval=0.5)
    assert down["labels"]["cluster"] == CLUSTER
    worker = ConsumerProcess(
        remediation_config(tmp_path, nats_url, kubeconfig),
        tmp_path / "remediation.log",
    ).start()
    try:

        async def holding() -> bool:
            assert worker.running(), worker.logs()[-3000:]
            held = {h["id"] for h in worker.log_events("held")}
            return len(held) >= 3

        await eventually(holding, timeout=60, interval=0.5)
        await asyncio.sleep(6)  # held again and again: still nothing done
        assert worker.log_events("acted") == []
        assert await metric(worker, "k8s_event_remediation_held_total") >= 6
        assert (await worker.get("/readyz"))[0] == 200  # consuming, though it can not act
        assert max(h["delivery"] for h in worker.log_events("held")) >= 2

        cluster.start_apiserver()

        async def control_plane_resolved() -> bool:
            return not await control_plane_alert() and bool(
                webhook.resolved(alertname="KubernetesControlPlaneUnreachable", cluster=CLUSTER)
            )

        await eventually(control_plane_resolved, timeout=60, interval=0.5)

        def acted() -> list[dict[str, Any]]:
            return worker.log_events("acted")

        async def caught_up() -> bool:
            done = {a["uid"] for a in acted() if a["action"] == "delete_pod"}
            memory = [a for a in acted() if a["action"] == "suggest_memory"]
            return crash_uids <= done and len(memory) >= 1

        await eventually(caught_up, timeout=120, interval=1)
        # stop the crash loops, and let the worker finish what is in the stream
        for name in ("crash", "oom"):
            cluster.kubectl("scale", "deployment", name, "-n", ns, "--replicas=0")
        await asyncio.sleep(3)

        await eventually(
            lambda: consumer_idle(nats_url, "k8s-event-remediation"), timeout=90, interval=1
        )
        await eventually(
            lambda: consumer_idle(nats_url, "k8s-event-alerting"), timeout=60, interval=1
        )
        deletes_counted = await metric(
            worker, 'k8s_event_remediation_actions_total{action="delete_pod",result="acted"}'
        )
    finally:
        worker.kill()

    actions = acted()
    assert deletes_counted == len([a for a in actions if a["action"] == "delete_pod"])
    keys = collections.Counter(a["key"] for a in actions)
    assert keys and all(n == 1 for n in keys.values()), keys  # nothing done twice
    deleted = [a["uid"] for a in actions if a["action"] == "delete_pod"]
    assert crash_uids <= set(deleted)  # nothing held was lost
    # every Pod deleted is gone, and a crash Pod's replacement was deleted in turn, once each
    # (gone once kwok has played its deletion: a deleted Pod may still be listed a moment,
    # being deleted)

    async def deleted_gone() -> bool:
        return not set(deleted) & {p["metadata"]["uid"] for p in cluster.pods(ns, "crash")}

    await eventually(deleted_gone, timeout=60, interval=1)
    (memory,) = [a for a in actions if a["action"] == "suggest_memory"]
    assert memory["annotations"] == {SUGGESTION_KEY: "192Mi"}
    dep = cluster.get_json("deployment", "oom", "-n", ns)
    assert dep["metadata"]["annotations"][SUGGESTION_KEY] == "192Mi"
    assert memory["uid"] == dep["metadata"]["uid"]

    records = record_events(cluster, ns)
    by_reason = collections.Counter(e["reason"] for e in records)
    assert by_reason["RemediationPodDeleted"] == len(deleted)
    assert by_reason["RemediationMemorySuggested"] == 1
    assert {
        e["involvedObject"]["uid"] for e in records if e["reason"] == "RemediationPodDeleted"
    } == set(deleted)
    for e in records:
        assert e["reportingComponent"] == "k8s-event-remediation"
        trigger = e["metadata"]["annotations"]["remediation.k8s-event-bridge.io/trigger"]
        assert trigger.count("/") == 1  # the CloudEvent id: <event uid>/<resourceVersion>

    # the alerts: exactly one per Pod and reason the stream carries, with its newest count. A
    # Pod scaled away may still write a last count bump: the alerts are read first, then the
    # stream (whatever an alert shows came from the stream), until both tell the same.
    newest: dict[tuple[str, str], int] = {}
    shown: dict[tuple[str, str], Any] = {}

    async def alerts_follow_the_stream() -> bool:
        alerts = await am.alerts(
            filters=['alertname="KubernetesWarningEvent"', f'namespace="{ns}"']
        )
        newest.clear()
        for e in await stream_events(nats_url):
            if e.reason == "BackOff" and e.namespace == ns:
                key = (e.involved.name, e.reason)
                newest[key] = max(newest.get(key, 0), e.count)
        shown.clear()
        shown.update({(a["labels"]["name"], a["labels"]["reason"]): a for a in alerts})
        return set(shown) == set(newest) and all(
            a["annotations"]["count"] == str(newest[key]) for key, a in shown.items()
        )

    with contextlib.suppress(NotMet):
        await eventually(alerts_follow_the_stream, timeout=60, interval=1)
    assert set(shown) == set(newest)  # none missing, none made up
    for key, alert in shown.items():
        assert alert["labels"]["cluster"] == CLUSTER and alert["labels"]["kind"] == "Pod"
        assert alert["annotations"]["count"] == str(newest[key]), key
    fired = collections.Counter(
        a["labels"]["name"]
        for a in webhook.firing(alertname="KubernetesWarningEvent", namespace=ns)
    )
    assert set(fired) <= {name for name, _ in newest} and all(n == 1 for n in fired.values())
    assert len(webhook.firing(alertname="KubernetesControlPlaneUnreachable")) == 1


@pytest.mark.timeout(300)
async def test_a_dry_run_changes_nothing_and_records_what_it_would_do(
    living_cluster: LivingCluster, nats_server: Any, tmp_path: Path
) -> None:
    """The default: each action sent with dryRun=All (the API server checks the delete under
    the worker's RBAC and changes nothing) and recorded as a RemediationDryRun Event, once per
    Pod however often its count is bumped."""
    cluster = living_cluster
    bridge = await start_bridge(tmp_path, nats_server.url, cluster)
    ns = cluster.create_namespace(f"subscribers-{next(_ns)}")
    kubeconfig = worker_kubeconfig(cluster, ns)
    worker = ConsumerProcess(
        remediation_config(tmp_path, nats_server.url, kubeconfig, dry_run=True),
        tmp_path / "remediation.log",
    ).start()
    try:
        cluster.apply(crash_deployment("dry", ns, 2))

        def bumped_past() -> set[str]:
            return {
                e["involvedObject"]["uid"]
                for e in cluster.get_json("events", "-n", ns)["items"]
                if e["reason"] == "BackOff" and e.get("count", 0) >= MIN_COUNT + 2
            }

        await eventually(
            lambda: asyncio.to_thread(lambda: len(bumped_past()) == 2), timeout=120, interval=1
        )

        async def recorded() -> bool:
            dry = [e for e in record_events(cluster, ns) if e["reason"] == "RemediationDryRun"]
            return len(dry) == 2

        await eventually(recorded, timeout=60, interval=1)
        await asyncio.sleep(3)
        dry_counted = await metric(
            worker, 'k8s_event_remediation_actions_total{action="delete_pod",result="acted"}'
        )
    finally:
        worker.kill()
        bridge.kill()
    pods = {p["metadata"]["uid"] for p in cluster.pods(ns, "dry")}
    records = record_events(cluster, ns)
    assert [e["reason"] for e in records] == ["RemediationDryRun"] * 2
    assert {e["involvedObject"]["uid"] for e in records} == pods  # the same Pods: none deleted
    assert all("would delete Pod" in e["message"] for e in records)
    acted = worker.log_events("acted")
    assert len(acted) == 2 and all(a["dry_run"] for a in acted), json.dumps(acted)
    assert dry_counted == 2
    cluster.kubectl("delete", "namespace", ns, "--wait=false")


async def test_the_workers_api_boundary_maps_what_the_real_apiserver_answers(
    control_plane: ControlPlane,
) -> None:
    """What kube.py relies on, as the real API server does it: a dry-run delete or patch
    changes nothing (a DELETE with a DeleteOptions body takes dryRun from the body: the query's
    is ignored, and the Pod would be gone), a stale uid is a Conflict (409 for a delete's
    precondition, 422 "immutable" for a patch), a missing object NotFound, a stopped API
    server Unavailable."""
    cp = control_plane
    ns = f"boundary-{next(_ns)}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("run", "p", "-n", ns, "--image=registry.invalid/app:1")
    cp.kubectl("create", "deployment", "d", "-n", ns, "--image=registry.invalid/app:1")

    def get(kind: str, name: str) -> dict[str, Any]:
        return json.loads(cp.kubectl("get", kind, name, "-n", ns, "-o", "json").stdout)

    pod_uid = get("pod", "p")["metadata"]["uid"]
    dep_uid = get("deployment", "d")["metadata"]["uid"]
    kube = Kube(KubernetesSettings(cluster="c", kubeconfig=str(cp.kubeconfig), request_timeout=3))
    await kube.connect()
    try:
        await kube.delete_pod(ns, "p", pod_uid, dry_run=True)
        await kube.annotate("apps/v1", "Deployment", ns, "d", dep_uid, {"a.io/b": "1"}, True)
        assert get("pod", "p")["metadata"]["uid"] == pod_uid
        assert "a.io/b" not in (get("deployment", "d")["metadata"].get("annotations") or {})

        with pytest.raises(Conflict):
            await kube.delete_pod(ns, "p", "not-its-uid", dry_run=False)
        with pytest.raises(Conflict):
            await kube.annotate("apps/v1", "Deployment", ns, "d", "not-its-uid", {}, False)
        with pytest.raises(NotFound):
            await kube.get("v1", "Pod", ns, "nobody")

        await kube.annotate("apps/v1", "Deployment", ns, "d", dep_uid, {"a.io/b": "1"}, False)
        await kube.delete_pod(ns, "p", pod_uid, dry_run=False)
        assert get("deployment", "d")["metadata"]["annotations"]["a.io/b"] == "1"
        with pytest.raises(NotFound):
            await kube.get("v1", "Pod", ns, "p")

        cp.stop_apiserver()
        with pytest.raises(Unavailable):
            await kube.get("v1", "Pod", ns, "p")
    finally:
        await kube.close()
        if not cp.apiserver.running:
            cp.start_apiserver()


async def test_at_debug_level_the_worker_logs_no_response_body(
    control_plane: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    """The attack (issue 31, low): a subscriber at debug level logged kubernetes_asyncio's
    ``response body`` line, the whole Pod as the API server has it, env values included. The
    worker's requests go through the shared connection, which reads each answer raw: at debug
    level, of every logger, no byte of a body is logged, read or refused."""
    cp = control_plane
    ns = f"bodies-{next(_ns)}"
    secret = "hunter2-in-a-pod-env"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("run", "p", "-n", ns, "--image=registry.invalid/app:1", f"--env=PASSWORD={secret}")
    kube = Kube(KubernetesSettings(cluster="c", kubeconfig=str(cp.kubeconfig), request_timeout=5))
    await kube.connect()
    caplog.set_level(logging.DEBUG)
    # the library's own loggers too, whatever the programs' log set-up keeps them at
    caplog.set_level(logging.DEBUG, logger="kubernetes_asyncio")
    try:
        pod = await kube.get("v1", "Pod", ns, "p")
        assert pod["spec"]["containers"][0]["env"] == [{"name": "PASSWORD", "value": secret}]
        with pytest.raises(Conflict):  # a refusal's body: the Status object
            await kube.delete_pod(ns, "p", "not-its-uid", dry_run=False)
    finally:
        await kube.close()
    assert logging.getLogger("kubernetes_asyncio.client.rest").isEnabledFor(logging.DEBUG)
    leaked = [
        f"{r.name}: {r.getMessage()[:120]}" for r in caplog.records if secret in r.getMessage()
    ]
    assert leaked == []
    cp.kubectl("delete", "namespace", ns, "--wait=false")


def test_the_subscribers_manifests_are_accepted_by_the_api_server(
    control_plane: ControlPlane,
) -> None:
    """deploy/consumers/ (kustomize: the alerting pair, the remediation worker, its RBAC and
    its admission policy, the OTLP subscriber, the digests' program), checked by the real API
    server (a server-side dry run: schema, defaulting, validation, admission), after deploy/ as
    an operator applies them."""
    cp = control_plane
    cp.kubectl("apply", "-k", str(REPO / "deploy"))
    out = cp.kubectl(
        "apply", "-k", str(REPO / "deploy" / "consumers"), "--dry-run=server", "-o", "name"
    ).stdout.split()
    assert sorted(out) == sorted(
        [
            "configmap/k8s-event-alerting",
            "service/k8s-event-alerting",
            "statefulset.apps/k8s-event-alerting",
            "poddisruptionbudget.policy/k8s-event-alerting",
            "serviceaccount/k8s-event-remediation",
            "clusterrole.rbac.authorization.k8s.io/k8s-event-remediation",
            "rolebinding.rbac.authorization.k8s.io/k8s-event-remediation",
            "validatingadmissionpolicy.admissionregistration.k8s.io/k8s-event-remediation",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io/k8s-event-remediation",
            "configmap/k8s-event-remediation",
            "deployment.apps/k8s-event-remediation",
            "serviceaccount/k8s-event-otlp",
            "configmap/k8s-event-otlp",
            "deployment.apps/k8s-event-otlp",
            "poddisruptionbudget.policy/k8s-event-otlp",
            "serviceaccount/k8s-event-digests",
            "configmap/k8s-event-digests",
            "service/k8s-event-digests",
            "statefulset.apps/k8s-event-digests",
            "poddisruptionbudget.policy/k8s-event-digests",
        ]
    )


# -- what the worker trusts (issue: an attacker with publish rights on the subject)

FORGED_AT = "2026-01-01T00:00:00Z"


def forged_event(
    namespace: str, name: str, uid: str, pod: tuple[str, str, str], *, reason: str = "BackOff"
) -> dict[str, Any]:
    """A Kubernetes Event as an attacker writes it: the documented shape, BackOff x10, just
    now, about ``pod`` (namespace, name, uid; uid may be "")."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    involved = {"apiVersion": "v1", "kind": "Pod", "namespace": pod[0], "name": pod[1]}
    if pod[2]:
        involved["uid"] = pod[2]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": str(900_000_000 + next(_ns)),
            "creationTimestamp": FORGED_AT,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": "Back-off restarting failed container app",
        "type": "Warning",
        "count": 10,
        "firstTimestamp": FORGED_AT,
        "lastTimestamp": now,
        "source": {"component": "kubelet", "host": "kwok-node-0"},
    }


async def publish_forged(nats_url: str, obj: dict[str, Any]) -> None:
    """Straight into the stream, as the bridge would write it, but without a Msg-Id (JetStream
    would drop a copy of a genuine id as a duplicate)."""
    msg = Converter(CLUSTER, "k8s.events", "structured").convert(obj)
    headers = {k: v for k, v in (msg.headers or {}).items() if k != "Nats-Msg-Id"}
    nc = await nats.connect(nats_url)
    try:
        await nc.jetstream().publish(msg.subject, msg.payload, headers=headers)
    finally:
        await nc.close()


def healthy_deployment(name: str, namespace: str) -> Any:
    return deployment(name, namespace, 1)


@pytest.mark.timeout(420)
async def test_forged_messages_change_nothing_and_a_genuine_crash_loop_is_handled_once(
    living_cluster: LivingCluster, nats_server: Any, tmp_path: Path
) -> None:
    """The worker with dry_run false, allowed in the shop's and another tenant's namespace
    (so only its own checks stand between a message and an action), and messages in the
    documented CloudEvent form published straight into the stream: BackOff x10 naming (a) a
    healthy, controlled Pod in kube-system, without and with its uid, (b) a healthy Pod in
    the other tenant's namespace with its real uid (an Event that does not exist, and that
    Pod's real Scheduled Event relabelled BackOff), (c) the crash-looping Pod under another
    Pod's uid, and an Event in the shop naming the tenant's Pod (refused by the tenancy rule,
    ``reference_untrusted``). None of those Pods is touched and each message is counted
    untrusted with its why; the genuinely crash-looping
    Pod, with its real Event, is deleted once, and a forged copy of that real Event does not
    make it twice."""
    cluster = living_cluster
    bridge = await start_bridge(tmp_path, nats_server.url, cluster)
    shop = cluster.create_namespace(f"shop-{next(_ns)}")
    tenant = cluster.create_namespace(f"tenant-{next(_ns)}")
    kubeconfig = worker_kubeconfig(cluster, shop, tenant)
    system_app = f"coredns-{next(_ns)}"
    cluster.apply(healthy_deployment(system_app, "kube-system"))
    cluster.apply(healthy_deployment("billing", tenant))
    worker = ConsumerProcess(
        remediation_config(tmp_path, nats_server.url, kubeconfig),
        tmp_path / "remediation.log",
    ).start()
    try:
        await eventually(
            lambda: asyncio.to_thread(
                lambda: (
                    bool(cluster.running("kube-system", system_app))
                    and bool(cluster.running(tenant, "billing"))
                )
            ),
            timeout=90,
            interval=1,
        )
        (system_pod,) = cluster.running("kube-system", system_app)
        (tenant_pod,) = cluster.running(tenant, "billing")
        sys_ref = ("kube-system", system_pod["metadata"]["name"], system_pod["metadata"]["uid"])
        ten_ref = (tenant, tenant_pod["metadata"]["name"], tenant_pod["metadata"]["uid"])
        scheduled = [
            e
            for e in cluster.get_json("events", "-n", tenant)["items"]
            if e["involvedObject"].get("uid") == ten_ref[2]
        ]
        assert scheduled, "the scheduler's and kwok's Events about the tenant's Pod"
        real = scheduled[0]
        cluster.apply(crash_deployment("crash", shop, 1))

        forged = {
            "no_involved_uid": forged_event(
                "kube-system", f"{sys_ref[1]}.f1", "forged-1", (*sys_ref[:2], "")
            ),
            "namespace_denied": forged_event(
                "kube-system", f"{sys_ref[1]}.f2", "forged-2", sys_ref
            ),
            "event_not_found": forged_event(tenant, f"{ten_ref[1]}.f3", "forged-3", ten_ref),
            "event_mismatch": forged_event(
                tenant, real["metadata"]["name"], real["metadata"]["uid"], ten_ref
            ),
        }
        for obj in forged.values():
            await publish_forged(nats_server.url, obj)

        # the genuine crash loop: its BackOff reaches MIN_COUNT, the worker deletes the Pod
        async def crash_deleted() -> list[dict[str, Any]]:
            assert worker.running(), worker.logs()[-3000:]
            return [a for a in worker.log_events("acted") if a["action"] == "delete_pod"]

        first = (await eventually(crash_deleted, timeout=150, interval=1))[0]
        genuine = next(e for e in await stream_events(nats_server.url) if e.id == first["id"])
        # (c) the crash-looping Pod's real Event under the tenant's Pod's uid; a shop Event
        # about the tenant's Pod; and a plain copy of the genuine one
        crash_ref = (shop, genuine.involved.name, genuine.involved.uid)
        await publish_forged(
            nats_server.url,
            forged_event(shop, genuine.name, genuine.uid, (*crash_ref[:2], ten_ref[2])),
        )
        await publish_forged(
            nats_server.url, forged_event(shop, f"{ten_ref[1]}.f4", "forged-4", ten_ref)
        )
        await publish_forged(nats_server.url, genuine.data)
        for name in ("crash",):
            cluster.kubectl("scale", "deployment", name, "-n", shop, "--replicas=0")

        async def judged() -> bool:
            whys = collections.Counter(u["why"] for u in worker.log_events("untrusted"))
            return (
                whys["no_involved_uid"] >= 1
                and whys["namespace_denied"] >= 1
                and whys["event_not_found"] >= 1
                and whys["event_mismatch"] >= 2
                # the shop's Event about the tenant's Pod: another namespace's object, refused
                # by the one rule before the Event is read back (docs/design.md, the tenant's word)
                and whys["reference_untrusted"] >= 1
            )

        await eventually(judged, timeout=60, interval=1)
        await eventually(
            lambda: consumer_idle(nats_server.url, "k8s-event-remediation"), timeout=60, interval=1
        )
        untrusted_counted = {
            why: await metric(worker, f'k8s_event_remediation_untrusted_total{{why="{why}"}}')
            for why in (
                "no_involved_uid",
                "namespace_denied",
                "event_not_found",
                "event_mismatch",
                "reference_untrusted",
            )
        }
    finally:
        worker.kill()
        bridge.kill()

    # the healthy Pods are untouched: the same Pods, running, not being deleted
    assert [p["metadata"]["uid"] for p in cluster.running("kube-system", system_app)] == [
        sys_ref[2]
    ]
    assert [p["metadata"]["uid"] for p in cluster.running(tenant, "billing")] == [ten_ref[2]]
    acted = worker.log_events("acted")
    assert {a["target"].split("/")[1] for a in acted} == {shop}, acted
    keys = collections.Counter(a["key"] for a in acted)
    assert all(n == 1 for n in keys.values()), keys  # nothing done twice
    assert [a["uid"] for a in acted].count(crash_ref[2]) == 1
    assert all(r["involvedObject"]["namespace"] == shop for r in record_events(cluster, shop))
    assert record_events(cluster, tenant) == []
    assert untrusted_counted["event_mismatch"] >= 2 and min(untrusted_counted.values()) >= 1
    for u in worker.log_events("untrusted"):
        assert u["id"] != first["id"] or u["why"] == "event_mismatch"
    cluster.kubectl("delete", "deployment", system_app, "-n", "kube-system", "--wait=false")
    for ns in (shop, tenant):
        cluster.kubectl("delete", "namespace", ns, "--wait=false")


async def test_the_workers_token_reaches_only_what_remediation_needs(
    control_plane: ControlPlane,
) -> None:
    """deploy/consumers/'s RBAC and admission policy on the real API server, with the worker's
    own token and its own client (kube.py): it deletes a crash-looping Pod in a namespace it
    is bound in and annotates a Deployment there with its remediation annotations; it is
    refused a healthy Pod there (the policy), anything in kube-system or an unbound namespace
    (RBAC), and any change to a Deployment but those annotations: its template, a label,
    another annotation (the policy)."""
    cp = control_plane
    ns = f"allowed-{next(_ns)}"
    other = f"unbound-{next(_ns)}"
    for n in (ns, other):
        cp.kubectl("create", "namespace", n)
    kubeconfig = worker_kubeconfig(cp, ns)

    def pod(namespace: str, name: str, crash_looping: bool) -> str:
        cp.kubectl("run", name, "-n", namespace, "--image=registry.invalid/app:1")
        if crash_looping:
            status = {
                "status": {
                    "containerStatuses": [
                        {
                            "name": name,
                            "image": "registry.invalid/app:1",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 5,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        }
                    ]
                }
            }
            cp.kubectl(
                "patch", "pod", name, "-n", namespace, "--subresource=status",
                "--type=merge", "-p", json.dumps(status),
            )  # fmt: skip
        out = cp.kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}")
        return out.stdout.strip()

    looping = pod(ns, "looping", True)
    healthy = pod(ns, "healthy", False)
    sys_name = f"looping-{next(_ns)}"
    system = pod("kube-system", sys_name, True)
    unbound = pod(other, "looping", True)
    cp.kubectl("create", "deployment", "web", "-n", ns, "--image=registry.invalid/app:1")
    dep = json.loads(cp.kubectl("get", "deployment", "web", "-n", ns, "-o", "json").stdout)
    dep_uid = dep["metadata"]["uid"]
    kube = Kube(KubernetesSettings(cluster="c", kubeconfig=str(kubeconfig), request_timeout=5))
    await kube.connect()
    suggestion = {SUGGESTION_KEY: "192Mi"}
    try:
        # the policy is in force once the API server has loaded it: a dry run tells
        async def policy_in_force() -> bool:
            try:
                await kube.delete_pod(ns, "healthy", healthy, dry_run=True)
            except Refused:
                return True
            return False

        await eventually(policy_in_force, timeout=60, interval=0.5)
        with pytest.raises(Refused, match="CrashLoopBackOff"):
            await kube.delete_pod(ns, "healthy", healthy, dry_run=False)
        for namespace, name, uid in (
            ("kube-system", sys_name, system),
            (other, "looping", unbound),
        ):
            with pytest.raises(Refused, match="403"):
                await kube.delete_pod(namespace, name, uid, dry_run=False)
            with pytest.raises(Refused, match="403"):
                await kube.get("v1", "Event", namespace, "any")
        await kube.delete_pod(ns, "looping", looping, dry_run=False)
        with pytest.raises(NotFound):
            await kube.get("v1", "Pod", ns, "looping")

        await kube.annotate("apps/v1", "Deployment", ns, "web", dep_uid, suggestion, False)
        for patch, what in (
            ({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "registry.invalid/evil:1"}]}}}}, "spec"),
            ({"spec": {"replicas": 0}}, "spec"),
            ({"metadata": {"labels": {"app": "evil"}}}, "labels"),
            ({"metadata": {"annotations": {"other.io/x": "1"}}}, "only the remediation"),
        ):  # fmt: skip
            with pytest.raises(Refused, match=what):
                await kube.request(
                    "PATCH",
                    f"/apis/apps/v1/namespaces/{ns}/deployments/web",
                    body=patch,
                    content_type="application/merge-patch+json",
                )
        with pytest.raises(Refused, match="403"):
            await kube.request("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/web")
        with pytest.raises(Refused, match="403"):
            await kube.annotate(
                "apps/v1", "DaemonSet", "kube-system", "kube-proxy", "x", suggestion, False
            )
    finally:
        await kube.close()
    after = json.loads(cp.kubectl("get", "deployment", "web", "-n", ns, "-o", "json").stdout)
    assert after["spec"] == dep["spec"] | {"template": after["spec"]["template"]}
    assert after["spec"]["template"] == dep["spec"]["template"]
    assert after["metadata"]["annotations"][SUGGESTION_KEY] == "192Mi"
    assert "other.io/x" not in after["metadata"]["annotations"]
    for namespace, name in ((ns, "healthy"), ("kube-system", sys_name), (other, "looping")):
        cp.kubectl("get", "pod", name, "-n", namespace)  # still there
    cp.kubectl("delete", "pod", sys_name, "-n", "kube-system", "--wait=false")


@pytest.mark.timeout(180)
async def test_the_alerting_pairs_pods_carry_the_ordinal_their_durables_are_named_after(
    living_cluster: LivingCluster,
) -> None:
    """deploy/consumers/alerting.yaml on a living cluster: the real StatefulSet controller
    labels each Pod apps.kubernetes.io/pod-index (0, 1), which ALERTING_NATS__DURABLE is
    built from (k8s-event-alerting-$(POD_INDEX): the durables the NATS permissions name)."""
    cluster = living_cluster
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(CONSUMERS / "alerting.yaml"))
    try:

        def labelled() -> dict[str, str]:
            pods = cluster.get_json(
                "pods", "-n", BRIDGE_NAMESPACE, "-l", "app.kubernetes.io/name=k8s-event-alerting"
            )["items"]
            return {
                p["metadata"]["name"]: p["metadata"]["labels"].get("apps.kubernetes.io/pod-index")
                for p in pods
            }

        await eventually(
            lambda: asyncio.to_thread(lambda: len(labelled()) == 2), timeout=120, interval=1
        )
        assert labelled() == {"k8s-event-alerting-0": "0", "k8s-event-alerting-1": "1"}
    finally:
        cluster.kubectl("delete", "-f", str(CONSUMERS / "alerting.yaml"), "--wait=false")
