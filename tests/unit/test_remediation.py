"""The remediation worker's decisions (rules.py, pure) and its once-only bookkeeping (worker.py)
against an in-memory API server that can be taken down."""

from __future__ import annotations

import copy
import dataclasses
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from k8s_event_common.clock import ManualClock
from k8s_event_consumer.consuming import Delivery, Discard, Retry
from k8s_event_consumer.events import Decoded, KubeEvent, ObjectRef
from k8s_event_consumer.remediation import rules
from k8s_event_consumer.remediation import worker as worker_module
from k8s_event_consumer.remediation.kube import Conflict, NotFound, Refused, Unavailable
from k8s_event_consumer.remediation.settings import RemediationSettings, Settings
from k8s_event_consumer.remediation.worker import TRIGGER_ANNOTATION, UNTRUSTED, Worker


def kube_event(
    reason: str = "BackOff", count: int = 5, uid: str = "pod-uid", rv: int = 1
) -> KubeEvent:
    return KubeEvent(
        id=f"ev-uid/{rv}",
        cluster="prod",
        uid="ev-uid",
        resource_version=str(rv),
        namespace="shop",
        name="web-1.abc",
        reason=reason,
        type="Warning",
        message="Back-off restarting failed container",
        count=count,
        first_seen=None,
        last_seen=datetime(2026, 11, 30, tzinfo=UTC),
        involved=ObjectRef("Pod", "shop", "web-1", uid),
        reporting_component="kubelet",
        reporting_instance="node-1",
        data={},
    )


RS_LABELS = {"app": "web", "pod-template-hash": "7d9"}


def pod(
    *,
    oom: bool = False,
    owned: bool = True,
    uid: str = "pod-uid",
    waiting: str | None = "CrashLoopBackOff",
    restarts: int = 5,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web-1", "namespace": "shop", "uid": uid, "labels": RS_LABELS}
    if owned:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web-7d9",
                "uid": "rs-uid",
                "controller": True,
            }
        ]
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "app", "resources": {"limits": {"memory": "128Mi"}}}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "app",
                    "restartCount": restarts,
                    "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}},
                    "lastState": {"terminated": {"reason": "OOMKilled" if oom else "Error"}},
                }
            ]
        },
    }


DEPLOYMENT = (
    {
        "metadata": {"name": "web", "namespace": "shop", "uid": "dep-uid", "generation": 3},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "spec": {
                    "containers": [{"name": "app", "resources": {"limits": {"memory": "128Mi"}}}]
                }
            },
        },
    },
    "apps/v1",
    "Deployment",
)
REPLICASET = {
    "metadata": {
        "name": "web-7d9",
        "namespace": "shop",
        "uid": "rs-uid",
        "labels": RS_LABELS,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "web",
                "uid": "dep-uid",
                "controller": True,
            }
        ],
    },
    "spec": {"selector": {"matchLabels": RS_LABELS}},
}
CFG = RemediationSettings(dry_run=False)


@pytest.mark.parametrize(
    ("quantity", "factor", "want"),
    [
        ("128Mi", 1.5, "192Mi"),
        ("1Gi", 1.5, "1536Mi"),
        ("100M", 1.2, "115Mi"),
        ("1e9", 1.1, "1050Mi"),
    ],
)
def test_a_memory_suggestion_is_the_limit_times_the_factor_rounded_up_to_a_mib(
    quantity: str, factor: float, want: str
) -> None:
    assert rules.suggest(quantity, factor) == want


def test_a_backoff_that_reached_min_count_deletes_the_pod_keyed_by_its_uid() -> None:
    assert rules.plan(kube_event(count=4), pod(), DEPLOYMENT, CFG) is None
    a = rules.plan(kube_event(count=5), pod(), DEPLOYMENT, CFG)
    assert a is not None and a.kind == rules.DELETE_POD
    assert a.key == "delete_pod/pod-uid/0" and a.owner == "Deployment/shop/web"
    # a later count bump of the same Event is the same action
    b = rules.plan(kube_event(count=9, rv=2), pod(), DEPLOYMENT, CFG)
    assert b is not None and b.key == a.key and b.record_name(False) == a.record_name(False)
    assert a.record_name(True) != a.record_name(False)  # a dry run is recorded apart


def test_a_pod_nobody_recreates_or_a_newer_pod_of_that_name_is_left_alone() -> None:
    assert rules.plan(kube_event(), pod(owned=False), None, CFG) is None
    # owned, as the Pod says, but no controller proven (the caller passes none): left alone
    assert rules.plan(kube_event(), pod(), None, CFG) is None
    assert rules.plan(kube_event(), pod(uid="another"), None, CFG) is None
    normal = kube_event()
    normal = KubeEvent(**{**normal.__dict__, "type": "Normal"})
    assert rules.plan(normal, pod(), None, CFG) is None


def test_an_oomkilled_container_gets_its_owner_annotated_instead_of_a_delete() -> None:
    a = rules.plan(kube_event(count=7), pod(oom=True), DEPLOYMENT, CFG)
    assert a is not None and a.kind == rules.SUGGEST_MEMORY
    assert a.target.kind == "Deployment" and a.key.startswith("suggest_memory/dep-uid/")
    # annotating a Deployment bumps its generation: still the same action
    bumped = copy.deepcopy(DEPLOYMENT[0])
    bumped["metadata"]["generation"] = 4
    again = rules.plan(kube_event(count=8), pod(oom=True), (bumped, *DEPLOYMENT[1:]), CFG)
    assert again is not None and again.key == a.key
    assert a.annotations == {"remediation.k8s-event-bridge.io/suggested-memory-limit.app": "192Mi"}
    # no owner found: nothing (a Pod's own annotation would die with it)
    assert rules.plan(kube_event(count=7), pod(oom=True), None, CFG) is None


def api_event(ev: KubeEvent | None = None, **changes: Any) -> dict[str, Any]:
    """The Event as the API server has it (the one ``kube_event`` describes)."""
    ev = ev or kube_event()
    out: dict[str, Any] = {
        "metadata": {"name": ev.name, "namespace": ev.namespace, "uid": ev.uid},
        "reason": ev.reason,
        "type": ev.type,
        "count": ev.count,
        "involvedObject": {
            "kind": ev.involved.kind,
            "namespace": ev.involved.namespace,
            "name": ev.involved.name,
            "uid": ev.involved.uid,
        },
    }
    out.update(changes)
    return out


class FakeKube:
    """The API server as the worker sees it; ``down`` makes every call Unavailable."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {"web-1": pod()}
        # the Events it has: the one kube_event() describes, then the worker's records
        self.events: dict[str, dict[str, Any]] = {"web-1.abc": api_event(kube_event(count=9))}
        self.reads: list[tuple[str, str, str]] = []
        self.deleted: list[tuple[str, bool]] = []
        self.down = False
        self.fail_delete_once = False
        self.annotated = 0
        self.owner_annotations: dict[str, str] = {}
        self.deployment_refs: list[dict[str, Any]] = []  # the Deployment's ownerReferences

    def _check(self) -> None:
        if self.down:
            raise Unavailable("connection refused")

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self._check()
        self.reads.append((kind, namespace, name))
        dep = copy.deepcopy(DEPLOYMENT[0])
        dep["metadata"]["annotations"] = dict(self.owner_annotations)
        if self.deployment_refs:
            dep["metadata"]["ownerReferences"] = copy.deepcopy(self.deployment_refs)
        found = {
            "Event": self.events,
            "Pod": self.pods,
            "ReplicaSet": {"web-7d9": REPLICASET},
            "Deployment": {"web": dep},
        }.get(kind, {})
        if name not in found:
            raise NotFound(name)
        return copy.deepcopy(found[name])

    async def delete_pod(self, namespace: str, name: str, uid: str, dry_run: bool) -> None:
        self._check()
        if self.fail_delete_once:
            self.fail_delete_once = False
            raise Unavailable("the API server went away between the record and the action")
        p = self.pods.get(name)
        if p is None:
            raise NotFound(name)
        if p["metadata"]["uid"] != uid:
            raise Conflict("uid precondition")
        self.deleted.append((uid, dry_run))
        if not dry_run:
            del self.pods[name]

    async def annotate(self, *args: Any) -> None:
        self._check()
        self.annotated += 1

    async def event_exists(self, namespace: str, name: str) -> bool:
        self._check()
        return name in self.events

    async def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        self._check()
        name = event["metadata"]["name"]
        if name in self.events:
            raise Conflict(name)
        self.events[name] = event


def records(kube: FakeKube) -> list[dict[str, Any]]:
    """The Events the worker wrote."""
    return [e for e in kube.events.values() if e["reason"].startswith("Remediation")]


def worker(kube: FakeKube, **remediation: Any) -> tuple[Worker, ManualClock]:
    """A worker on a manual clock: 1000 s of monotonic time at 2026-11-30T00:10:00Z."""
    at = datetime(2026, 11, 30, 0, 10, tzinfo=UTC).timestamp()
    clock = ManualClock(1000.0, wall_at_zero=at - 1000.0)
    settings = Settings(
        kubernetes={"cluster": "prod"},
        remediation={"dry_run": False, **remediation},
    )
    w = Worker(
        settings,
        kube,  # type: ignore[arg-type]
        clock=clock,
        namespace="k8s-event-bridge",
    )
    return w, clock


def delivery(n: int = 1) -> Delivery:
    return Delivery(Decoded("s", None, None), 1, n, None)  # type: ignore[arg-type]


async def test_each_action_is_done_once_whatever_repeats_and_recorded_as_an_event() -> None:
    kube = FakeKube()
    w, _ = worker(kube)
    await w.on_event(kube_event(count=5, rv=1), delivery())
    await w.on_event(kube_event(count=6, rv=2), delivery())  # the Event's count bumped
    await w.on_event(kube_event(count=5, rv=1), delivery(2))  # redelivered
    assert kube.deleted == [("pod-uid", False)]
    (record,) = records(kube)
    assert record["reason"] == "RemediationPodDeleted"
    assert record["involvedObject"]["uid"] == "pod-uid"
    assert record["metadata"]["annotations"][TRIGGER_ANNOTATION] == "ev-uid/1"
    assert w.counts.acted == 1


async def test_while_the_api_server_is_down_the_message_is_held_then_done_once() -> None:
    kube = FakeKube()
    w, _ = worker(kube, hold="7s")
    kube.down = True
    for n in (1, 2, 3):
        with pytest.raises(Retry) as held:
            await w.on_event(kube_event(), delivery(n))
        assert held.value.delay == 7.0
    assert kube.deleted == [] and w.counts.held == 3
    kube.down = False
    await w.on_event(kube_event(), delivery(4))
    assert kube.deleted == [("pod-uid", False)] and len(records(kube)) == 1


async def test_stopped_between_the_record_and_the_action_the_retry_acts_once() -> None:
    kube = FakeKube()
    w, _ = worker(kube)
    kube.fail_delete_once = True
    with pytest.raises(Retry):
        await w.on_event(kube_event(), delivery(1))
    assert kube.deleted == [] and len(records(kube)) == 1  # recorded, not yet done
    w2, _ = worker(kube)  # a new process: no memory but the API server's
    await w2.on_event(kube_event(), delivery(2))
    await w2.on_event(kube_event(), delivery(3))  # and once more: the Pod is gone
    assert kube.deleted == [("pod-uid", False)] and len(records(kube)) == 1


async def test_an_owner_that_carries_the_suggestion_already_is_not_patched_again() -> None:
    kube = FakeKube()
    kube.pods["web-1"] = pod(oom=True)
    w, _ = worker(kube)
    await w.on_event(kube_event(), delivery())
    assert kube.annotated == 1 and len(records(kube)) == 1
    kube.owner_annotations.update(
        {"remediation.k8s-event-bridge.io/suggested-memory-limit.app": "192Mi"}
    )
    await w.on_event(kube_event(rv=2), delivery())
    for r in records(kube):  # the record expired (Event TTL): written again, nothing patched
        del kube.events[r["metadata"]["name"]]
    await w.on_event(kube_event(rv=3), delivery())
    assert kube.annotated == 1 and len(records(kube)) == 1 and w.counts.already_done == 2


async def test_one_action_per_object_within_the_rate_limit() -> None:
    kube = FakeKube()
    w, now = worker(kube, rate_limit="10m", restart={"min_count": 1})
    await w.on_event(kube_event(), delivery())
    # the same object, a different key (a dry run now records apart): rate-limited
    w.cfg = RemediationSettings(dry_run=True, rate_limit=600, restart={"min_count": 1})
    kube.pods["web-1"] = pod()
    await w.on_event(kube_event(rv=2), delivery())
    assert w.counts.rate_limited == 1 and len(records(kube)) == 1
    now.advance(601)
    await w.on_event(kube_event(rv=3), delivery())
    assert len(records(kube)) == 2 and kube.deleted[-1] == ("pod-uid", True)


async def test_a_dry_run_sends_the_action_as_a_dry_run_and_records_it_as_such() -> None:
    kube = FakeKube()
    w, _ = worker(kube, dry_run=True)
    await w.on_event(kube_event(), delivery())
    assert kube.deleted == [("pod-uid", True)] and "web-1" in kube.pods
    (record,) = records(kube)
    assert record["reason"] == "RemediationDryRun" and "would delete" in record["message"]


async def test_other_clusters_and_objects_are_not_acted_on() -> None:
    kube = FakeKube()
    w, _ = worker(kube)
    other = KubeEvent(**{**kube_event().__dict__, "cluster": "staging"})
    await w.on_event(other, delivery())
    node = KubeEvent(**{**kube_event().__dict__, "involved": ObjectRef("Node", "", "n1")})
    await w.on_event(node, delivery())
    assert kube.deleted == [] and w.counts.ignored == 2


def test_the_cluster_is_required_and_named_when_missing() -> None:
    from k8s_event_consumer.configuring import ConfigError
    from k8s_event_consumer.remediation.settings import load

    with pytest.raises(ConfigError, match=r"kubernetes: required"):
        load(None)


def test_config_remediation_yaml_documents_every_key_with_its_default() -> None:
    from pathlib import Path

    import yaml

    from tests.config_keys import doc_keys, model_keys

    doc = yaml.safe_load(
        (Path(__file__).parents[2] / "config" / "remediation.yaml").read_text(encoding="utf-8")
    )
    cluster = {"cluster": doc["kubernetes"]["cluster"]}
    assert Settings(**doc).model_dump() == Settings(kubernetes=cluster).model_dump()

    assert model_keys(Settings(kubernetes=cluster)) == doc_keys(doc)


def test_check_config_prints_the_effective_config_and_a_bad_key_exits_2(
    tmp_path: Any, capsys: Any
) -> None:
    from k8s_event_consumer.remediation.__main__ import main

    good = tmp_path / "ok.yaml"
    good.write_text("kubernetes: {cluster: c}\nnats: {password: hunter2, user: u}\n")
    assert main(["check-config", "--config", str(good)]) == 0
    out = capsys.readouterr().out
    assert "cluster: c" in out and "hunter2" not in out and "password: '***'" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("kubernetes: {cluster: c}\nremediation: {restart: {min_cuont: 3}}\n")
    assert main(["check-config", "--config", str(bad)]) == 2
    assert "remediation.restart.min_cuont: unknown key" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_kubeconfig_that_can_not_be_used_exits_2_without_its_contents(
    tmp_path: Any, capsys: Any
) -> None:
    """A configuration error (the shared connection's ``KubeConfigError``), before NATS: one
    line, exit 2; of a kubeconfig that is not YAML, only the line where it broke."""
    from k8s_event_consumer.remediation.__main__ import main

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("users: [{name: u, user: {token: s3cr3t-t0ken}}\nclusters: [\n")
    config = tmp_path / "remediation.yaml"
    config.write_text(f"kubernetes: {{cluster: c, kubeconfig: {kubeconfig}}}\n")
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "kubernetes_config_unusable" in err and "not valid YAML" in err
    assert "s3cr3t-t0ken" not in err


def test_what_the_rate_limit_remembers_is_bounded() -> None:
    kube = FakeKube()
    w, now = worker(kube, rate_limit="10m")
    for i in range(3000):
        w._acted_on(f"uid-{i}", now.now)
        now.advance(1.0)  # one action a second: only the last 10 minutes count
    assert len(w._last_action) == 600
    assert "uid-2999" in w._last_action and "uid-2399" not in w._last_action
    for i in range(3 * worker_module.LAST_ACTIONS):  # many at once: the count bounds it
        w._acted_on(f"burst-{i}", now.now)
    assert len(w._last_action) == worker_module.LAST_ACTIONS
    assert f"burst-{3 * worker_module.LAST_ACTIONS - 1}" in w._last_action
    w._acted_on("burst-0", now.now)  # acted on again: the newest, kept
    assert list(w._last_action)[-1] == "burst-0"


def test_the_counters_alerts_read_are_exported_from_zero() -> None:
    """K8sEventRemediationHolding and K8sEventAlertingHolding (deploy/monitoring/) take the
    increase of held_total: a series born at 1 would hide the first hold."""
    from k8s_event_consumer.alerting import running
    from k8s_event_consumer.metrics import Metrics
    from k8s_event_consumer.remediation import worker

    for module, prefix in ((worker, "k8s_event_remediation_"), (running, "k8s_event_alerting_")):
        text = Metrics(prefix, module.COUNTERS).render().decode()
        assert f"\n{prefix}held_total 0.0\n" in text
        # a labelled counter gets no unlabelled series
        assert f"\n{prefix}events_total 0.0\n" not in text
    # every why the owner walk may give is a series from 0 (docs/monitoring.md: a fixed set)
    from k8s_event_common import owners

    text = Metrics("k8s_event_remediation_", worker.COUNTERS).render().decode()
    for why in owners.UNPROVEN:
        assert f'\nk8s_event_remediation_owner_unproven_total{{why="{why}"}} 0.0\n' in text


# -- what the worker trusts: the API server, not the message (an attacker with publish rights
#    writes messages in the documented form; each of these must change nothing)


def forged(**changes: Any) -> KubeEvent:
    ev = kube_event()
    involved = changes.pop("involved", None)
    if involved is not None:
        changes["involved"] = ObjectRef("Pod", *involved)
    return dataclasses.replace(ev, **changes)


UNTRUSTED_CASES = {
    # (a) a healthy, controlled Pod in kube-system, without an involvedObject uid
    "no_uid": (forged(involved=("kube-system", "coredns-1", "")), None, "no_involved_uid"),
    "kube_system": (
        forged(namespace="kube-system", involved=("kube-system", "web-1", "pod-uid")),
        None,
        "namespace_denied",
    ),
    "own_namespace": (
        forged(namespace="k8s-event-bridge", involved=("k8s-event-bridge", "web-1", "pod-uid")),
        None,
        "namespace_denied",
    ),
    "path_in_a_name": (
        forged(involved=("shop", "../../kube-system/pods/x", "pod-uid")),
        None,
        "bad_name",
    ),
    "event_in_another_namespace": (forged(namespace="other"), None, "reference_untrusted"),
    # a name the API server does not have, last seen a minute ago: never there
    "no_such_event": (forged(name="web-1.forged"), None, "event_not_found"),
    "another_event_uid": (forged(uid="not-the-uid"), None, "event_mismatch"),
    # (b) another Pod's real uid in a message naming a real Event of a different Pod
    "another_pods_uid": (
        forged(involved=("shop", "web-1", "tenant-b-pod-uid")),
        None,
        "event_mismatch",
    ),
    "another_reason": (forged(reason="BackOff"), {"reason": "Unhealthy"}, "event_mismatch"),
    "a_normal_event": (forged(), {"type": "Normal"}, "event_mismatch"),
    "count_inflated": (forged(count=50), {"count": 2}, "count_not_confirmed"),
}


@pytest.mark.parametrize("case", list(UNTRUSTED_CASES))
async def test_a_message_the_api_server_does_not_confirm_is_never_acted_on(case: str) -> None:
    ev, real_changes, why = UNTRUSTED_CASES[case]
    kube = FakeKube()
    if real_changes:
        kube.events["web-1.abc"] = api_event(kube_event(count=9), **real_changes)
    w, _ = worker(kube)
    with pytest.raises(Discard):  # acked, its id not remembered: a genuine one may carry it
        await w.on_event(ev, delivery())
    assert kube.deleted == [] and kube.annotated == 0 and records(kube) == []
    assert w.counts.untrusted == 1 and w.metrics.value("untrusted_total", why=why) == 1
    if why in ("no_involved_uid", "namespace_denied", "bad_name", "reference_untrusted"):
        assert kube.reads == []  # decided before any request


async def test_a_healthy_pod_is_not_deleted_whatever_the_event_says() -> None:
    kube = FakeKube()
    kube.pods["web-1"] = pod(waiting=None, restarts=0)  # (b)/(a): running, never restarted
    w, _ = worker(kube)
    with pytest.raises(Discard):
        await w.on_event(kube_event(count=9), delivery())
    assert w.metrics.value("untrusted_total", why="pod_not_crash_looping") == 1
    assert kube.deleted == [] and records(kube) == []


async def test_an_oomkilling_on_a_pod_that_was_not_oomkilled_is_untrusted() -> None:
    kube = FakeKube()
    kube.events["web-1.abc"] = api_event(kube_event(reason="OOMKilling"))
    w, _ = worker(kube)
    with pytest.raises(Discard):
        await w.on_event(kube_event(reason="OOMKilling"), delivery())
    assert w.metrics.value("untrusted_total", why="pod_not_oom_killed") == 1
    assert kube.annotated == 0


async def test_a_crash_looping_pod_between_two_crashes_is_left_for_the_next_event() -> None:
    kube = FakeKube()
    kube.pods["web-1"] = pod(waiting=None, restarts=7)  # running again, for now
    w, _ = worker(kube)
    await w.on_event(kube_event(), delivery())  # genuine: acked, not untrusted
    assert kube.deleted == [] and w.counts.untrusted == 0 and w.counts.ignored == 1
    kube.pods["web-1"] = pod(restarts=8)
    await w.on_event(kube_event(count=6, rv=2), delivery())
    assert kube.deleted == [("pod-uid", False)]


async def test_the_api_servers_count_decides_not_the_messages() -> None:
    kube = FakeKube()
    kube.events["web-1.abc"] = api_event(kube_event(count=12))
    w, _ = worker(kube, restart={"min_count": 10})
    with pytest.raises(Discard):  # the Pod restarted 5 times only
        await w.on_event(kube_event(count=10), delivery())
    assert kube.deleted == [] and w.counts.untrusted == 1
    kube.pods["web-1"] = pod(restarts=10)
    await w.on_event(kube_event(count=10, rv=2), delivery())
    assert kube.deleted == [("pod-uid", False)]
    (record,) = records(kube)
    assert "x12" in record["message"]  # the confirmed count


async def test_an_event_deleted_by_its_ttl_is_stale_not_untrusted() -> None:
    kube = FakeKube()
    del kube.events["web-1.abc"]
    w, _ = worker(kube)  # its wall clock: 2026-11-30 00:10, the Event last seen at 00:00
    old = dataclasses.replace(kube_event(), last_seen=datetime(2026, 11, 29, 22, tzinfo=UTC))
    await w.on_event(old, delivery())  # acked and remembered: it was genuine
    assert w.counts.stale == 1 and w.counts.untrusted == 0 and kube.deleted == []
    assert w.metrics.value("events_total", result="stale") == 1
    with pytest.raises(Discard):
        await w.on_event(kube_event(), delivery())  # last seen 10 minutes ago: never there
    assert w.metrics.value("untrusted_total", why="event_not_found") == 1


async def test_the_allow_list_limits_the_namespaces_and_the_deny_list_wins() -> None:
    kube = FakeKube()
    w, _ = worker(kube, namespaces={"allow": ["shop", "kube-system"]})
    assert w.may_act_in("shop") and not w.may_act_in("other")
    assert not w.may_act_in("kube-system") and not w.may_act_in("k8s-event-bridge")
    await w.on_event(kube_event(), delivery())
    assert kube.deleted == [("pod-uid", False)]
    w2, _ = worker(FakeKube(), namespaces={"allow": ["billing"]})
    with pytest.raises(Discard):
        await w2.on_event(kube_event(), delivery())
    with pytest.raises(ValueError, match="not a namespace name"):
        Settings(kubernetes={"cluster": "c"}, remediation={"namespaces": {"deny": ["A/b"]}})


async def test_while_the_api_server_is_down_nothing_unconfirmed_is_done() -> None:
    kube = FakeKube()
    kube.pods["web-1"] = pod(waiting=None, restarts=0)
    w, _ = worker(kube)
    kube.down = True
    with pytest.raises(Retry):
        await w.on_event(kube_event(), delivery(1))
    kube.down = False
    with pytest.raises(Discard):
        await w.on_event(kube_event(), delivery(2))
    assert kube.deleted == []


async def test_an_answer_asking_again_will_not_change_ends_the_message() -> None:
    """A 403 (its RBAC does not reach that far) is logged and acked, not redelivered for
    ever."""
    kube = FakeKube()

    async def forbidden(*args: Any) -> dict[str, Any]:
        raise Refused("GET /api/v1/namespaces/shop/events/web-1.abc: 403 Forbidden")

    kube.get = forbidden  # type: ignore[method-assign]
    w, _ = worker(kube)
    await w.on_event(kube_event(), delivery())  # returns: acked
    assert w.counts.refused == 1 and w.metrics.value("events_total", result="refused") == 1


def test_the_untrusted_counter_has_every_why_from_zero_and_no_other() -> None:
    w, _ = worker(FakeKube())
    text = w.metrics.render().decode()
    for why in UNTRUSTED:
        assert f'k8s_event_remediation_untrusted_total{{why="{why}"}} 0.0' in text
    assert text.count("k8s_event_remediation_untrusted_total{") == len(UNTRUSTED)


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        ("shop", ".."),
        ("shop", "a/b"),
        ("shop", "a%2fb"),
        ("shop", "A"),
        ("shop", "x" * 254),
        ("kube-system/pods", "x"),
        ("", "x"),
        ("shop", "a\nb"),
    ],
)
def test_every_path_segment_is_a_kubernetes_name(namespace: str, name: str) -> None:
    from k8s_event_consumer.remediation.kube import Invalid, _path

    with pytest.raises(Invalid):
        _path("v1", "Pod", namespace, name)


def test_a_kubernetes_name_is_escaped_and_an_api_version_checked() -> None:
    from k8s_event_consumer.remediation.kube import Invalid, _path

    assert _path("apps/v1", "Deployment", "shop", "web.v2") == (
        "/apis/apps/v1/namespaces/shop/deployments/web.v2"
    )
    for bad in ("v1/../../api", "apps/v1?x=1", "V1"):
        with pytest.raises(Invalid):
            _path(bad, "Deployment", "shop", "web")


def test_plan_alone_deletes_only_a_pod_waiting_in_crash_loop_back_off() -> None:
    """rules.plan holds the rule by itself (the worker also checks first, to say why)."""
    assert rules.plan(kube_event(), pod(waiting=None, restarts=9), DEPLOYMENT, CFG) is None
    assert rules.plan(kube_event(), pod(restarts=4), DEPLOYMENT, CFG) is None  # too few
    a = rules.plan(kube_event(), pod(restarts=5), DEPLOYMENT, CFG)
    assert a is not None and "in CrashLoopBackOff" in a.why


@pytest.mark.parametrize(
    ("ref", "proof"),
    [
        # an unrelated Deployment, its real uid: a Deployment makes ReplicaSets, not Pods
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "dep-uid"},
            "unclaimed",
        ),
        # a kind of that name in another API group
        (
            {
                "apiVersion": "evil.example.com/v1",
                "kind": "Deployment",
                "name": "web",
                "uid": "dep-uid",
            },
            "group",
        ),
        # a ReplicaSet of that name, another uid
        ({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "x"}, "uid"),
    ],
)
@pytest.mark.parametrize("reason", ["OOMKilling", "BackOff"])
async def test_a_controller_the_pod_merely_names_is_never_annotated_nor_trusted(
    ref: dict[str, Any], proof: str, reason: str
) -> None:
    kube = FakeKube()
    forged = pod(oom=reason == "OOMKilling")
    forged["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    kube.pods["web-1"] = forged
    kube.events["web-1.abc"] = api_event(kube_event(reason=reason, count=9))
    w, _ = worker(kube)
    with pytest.raises(Discard):
        await w.on_event(kube_event(reason=reason, count=9), delivery())
    assert kube.annotated == 0 and kube.deleted == [] and records(kube) == []
    assert w.metrics.value("untrusted_total", why="owner_unproven") == 1
    assert w.metrics.value("owner_unproven_total", why=proof) == 1


async def test_a_pod_of_a_real_deployment_gets_its_deployment_annotated_and_is_deleted() -> None:
    kube = FakeKube()
    kube.pods["web-1"] = pod(oom=True)
    kube.events["web-1.abc"] = api_event(kube_event(reason="OOMKilling", count=1))
    w, now = worker(kube)
    await w.on_event(kube_event(reason="OOMKilling", count=1), delivery())
    assert kube.annotated == 1
    kube.pods["web-1"] = pod()
    kube.events["web-1.abc"] = api_event(kube_event(count=9))
    now.advance(10_000)
    await w.on_event(kube_event(count=9, rv=2), delivery())
    assert kube.deleted == [("pod-uid", False)]
    assert ("Deployment", "shop", "web") in kube.reads  # its owner found, up to the top


OPERATOR_REF = {
    "apiVersion": "apps.example.com/v1",
    "kind": "WebApp",
    "name": "web",
    "uid": "webapp-uid",
    "controller": True,
}


async def test_a_deployment_an_operator_manages_is_still_its_pods_proven_owner() -> None:
    """The walk stops at a kind it does not read (an operator's custom resource controls the
    Deployment): Pod → ReplicaSet → Deployment is proven all the same, and the worker acts on
    that; a Pod a custom resource controls directly has no proven controller."""
    kube = FakeKube()
    kube.deployment_refs = [OPERATOR_REF]
    kube.pods["web-1"] = pod(oom=True)
    kube.events["web-1.abc"] = api_event(kube_event(reason="OOMKilling", count=1))
    w, now = worker(kube)
    await w.on_event(kube_event(reason="OOMKilling", count=1), delivery())
    assert kube.annotated == 1  # the Deployment, the farthest owner proven
    kube.pods["web-1"] = pod()
    kube.events["web-1.abc"] = api_event(kube_event(count=9))
    now.advance(10_000)
    await w.on_event(kube_event(count=9, rv=2), delivery())
    assert kube.deleted == [("pod-uid", False)]

    kube = FakeKube()
    direct = pod()
    direct["metadata"]["ownerReferences"] = [OPERATOR_REF]
    kube.pods["web-1"] = direct
    w, _ = worker(kube)
    with pytest.raises(Discard):
        await w.on_event(kube_event(count=9), delivery())
    assert kube.deleted == []
    assert w.metrics.value("owner_unproven_total", why="kind") == 1


@pytest.mark.parametrize("length", [1, 40, 41, 63])
def test_a_suggestions_key_is_a_valid_annotation_key_for_any_container_name(length: int) -> None:
    base = RemediationSettings().memory.annotation
    names = ["a" * length, "a" * (length - 1) + "b"] if length > 1 else ["a", "b"]
    keys = [rules.annotation_key(base, n) for n in names]
    assert len(set(keys)) == 2  # distinct containers, distinct keys
    for key in keys:
        prefix, name = key.split("/")
        assert prefix == "remediation.k8s-event-bridge.io"
        assert len(name) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", name)
    if length <= 40:
        assert keys[0] == f"{base}.{names[0]}"  # short names: as they were


def test_a_base_annotation_leaving_no_room_for_the_container_is_refused() -> None:
    with pytest.raises(ValueError, match="no room"):
        RemediationSettings(memory={"annotation": "example.com/" + "a" * 53})
