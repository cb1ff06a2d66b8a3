"""The one owner walk (k8s_event_common.owners), pure: a controller reference counts only when
the owner, read, confirms it (uid, kind, group, namespace, its selector selecting the child),
and the walk stops at the last proven object saying why."""

from __future__ import annotations

from typing import Any

import pytest

from k8s_event_common import owners
from k8s_event_common.owners import Facts, Want

ALL = frozenset(owners.KINDS)
RS_LABELS = {"app": "web", "pod-template-hash": "7d9"}


def ref(kind: str, name: str, uid: str, api_version: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": api_version or owners.KINDS[kind].api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
    }


def obj(
    name: str,
    uid: str,
    *,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
    selector: Any = None,
    ns: str = "shop",
    **extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c"},  # not a controller
            owner,
        ]
    out: dict[str, Any] = {"metadata": meta, **extra}
    if selector is not None:
        out["spec"] = {**out.get("spec", {}), "selector": selector}
    return out


def deployment(selector: Any = None, **kw: Any) -> Facts:
    sel = selector if selector is not None else {"matchLabels": {"app": "web"}}
    return owners.facts("Deployment", obj("web", "dep-uid", selector=sel, **kw))


def replicaset(labels: dict[str, str] = RS_LABELS, **kw: Any) -> Facts:
    return owners.facts(
        "ReplicaSet",
        obj(
            "web-7d9",
            kw.pop("uid", "rs-uid"),
            labels=labels,
            selector={"matchLabels": labels},
            owner=kw.pop("owner", ref("Deployment", "web", "dep-uid")),
            **kw,
        ),
    )


def pod(labels: dict[str, str] = RS_LABELS, owner: Any = None, name: str = "web-7d9-a") -> Facts:
    return owners.facts(
        "Pod",
        obj(name, "pod-uid", labels=labels, owner=owner or ref("ReplicaSet", "web-7d9", "rs-uid")),
    )


def cluster(**overrides: Facts | str) -> dict[Want, Facts | str]:
    """A Deployment web → ReplicaSet web-7d9 (what the reads answer)."""
    read: dict[Want, Facts | str] = {
        Want("ReplicaSet", "shop", "web-7d9", "rs-uid"): replicaset(),
        Want("Deployment", "shop", "web", "dep-uid"): deployment(),
    }
    for kind, value in overrides.items():
        (want,) = [w for w in read if w.kind == kind]
        read[want] = value
    return read


def test_a_pod_of_a_real_deployment_is_proven_up_to_the_deployment() -> None:
    got = owners.drive(pod(), ALL, cluster())
    assert got.proven and got.why == owners.TOP
    assert [(f.kind, f.name) for f in got.chain] == [
        ("ReplicaSet", "web-7d9"),
        ("Deployment", "web"),
    ]


def test_an_object_without_a_controller_is_its_own_top() -> None:
    got = owners.drive(owners.facts("Pod", obj("lone", "u")), ALL, {})
    assert got.proven and got.chain == () and got.top is None


@pytest.mark.parametrize(
    ("case", "child", "read", "why", "proven_up_to"),
    [
        # a Pod naming the Deployment directly, with its real uid: the Deployment's selector
        # selects the Pod's labels only when the tenant copied them: here it did not
        (
            "forged-real-uid",
            pod(labels={"app": "evil"}, owner=ref("Deployment", "web", "dep-uid")),
            cluster(),
            owners.UNCLAIMED,
            [],
        ),
        (
            # the same, its labels copied from the Deployment's selector: a Deployment makes
            # ReplicaSets, never a Pod
            "forged-copied-labels",
            pod(labels={"app": "web"}, owner=ref("Deployment", "web", "dep-uid")),
            cluster(),
            owners.UNCLAIMED,
            [],
        ),
        (
            "another-group",
            pod(owner=ref("Deployment", "web", "dep-uid", "evil.example.com/v1")),
            cluster(),
            owners.GROUP,
            [],
        ),
        (
            "uid-mismatch",
            pod(owner=ref("ReplicaSet", "web-7d9", "old-uid")),
            {Want("ReplicaSet", "shop", "web-7d9", "old-uid"): replicaset()},
            owners.UID,
            [],
        ),
        ("no-uid", pod(owner=ref("ReplicaSet", "web-7d9", "")), cluster(), owners.UID, []),
        ("gone", pod(), {}, owners.NOTFOUND, []),
        (
            "kind-not-read",
            pod(owner=ref("Service", "web", "s")),  # a kind that claims nothing
            cluster(),
            owners.KIND,
            [],
        ),
        (
            "unknown-kind",
            pod(owner=ref("Deployment", "web", "d", "example.com/v1") | {"kind": "Rollout"}),
            cluster(),
            owners.KIND,
            [],
        ),
        (
            "bad-name",
            pod(owner=ref("ReplicaSet", "../secrets", "rs-uid")),
            cluster(),
            owners.INVALID,
            [],
        ),
        (
            "other-namespace",
            pod(),
            cluster(ReplicaSet=replicaset(ns="kube-system")),
            owners.NAMESPACE,
            [],
        ),
        (
            "pod-template-hash",
            pod(labels={"app": "web", "pod-template-hash": "other"}),
            # the ReplicaSet's selector without the hash: its own label still decides
            cluster(
                ReplicaSet=owners.facts(
                    "ReplicaSet",
                    obj(
                        "web-7d9",
                        "rs-uid",
                        labels=RS_LABELS,
                        selector={"matchLabels": {"app": "web"}},
                        owner=ref("Deployment", "web", "dep-uid"),
                    ),
                )
            ),
            owners.UNCLAIMED,
            [],
        ),
        (
            "deployment-not-claiming-its-rs",
            pod(),
            cluster(Deployment=deployment({"matchLabels": {"app": "other"}})),
            owners.UNCLAIMED,
            ["ReplicaSet"],
        ),
        ("read-refused", pod(), cluster(Deployment="forbidden"), "forbidden", ["ReplicaSet"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_link_not_proven_stops_the_walk_at_the_last_proven_object(
    case: str, child: Facts, read: dict[Want, Facts | str], why: str, proven_up_to: list[str]
) -> None:
    got = owners.drive(child, ALL, read)
    assert got.why == why and not got.proven, (case, got)
    assert [f.kind for f in got.chain] == proven_up_to
    assert got.detail


def test_only_the_kinds_the_walk_may_read_are_read() -> None:
    got = owners.drive(pod(), frozenset({"ReplicaSet"}), cluster())
    assert got.why == owners.KIND and [f.kind for f in got.chain] == ["ReplicaSet"]


def test_the_walk_stops_at_its_depth() -> None:
    # what the controllers make bounds a chain at 2 (Pod → ReplicaSet → Deployment), within
    # MAX_DEPTH; a smaller depth stops there, the owners so far proven
    w = owners.walk(pod(), ALL, max_depth=1)
    want = next(w)
    read = cluster()
    with pytest.raises(StopIteration) as done:
        w.send(read[want])
    got = done.value.value
    assert got.why == owners.DEPTH and [f.kind for f in got.chain] == ["ReplicaSet"]
    assert owners.drive(pod(), ALL, read).proven  # the same at MAX_DEPTH
    assert owners.MAX_DEPTH >= 2


@pytest.mark.parametrize(
    ("expression", "labels", "selects"),
    [
        ({"key": "tier", "operator": "In", "values": ["a", "b"]}, {"tier": "b"}, True),
        ({"key": "tier", "operator": "In", "values": ["a"]}, {"tier": "b"}, False),
        ({"key": "tier", "operator": "In", "values": ["a"]}, {}, False),
        ({"key": "tier", "operator": "NotIn", "values": ["a"]}, {"tier": "b"}, True),
        ({"key": "tier", "operator": "NotIn", "values": ["a"]}, {}, True),
        ({"key": "tier", "operator": "NotIn", "values": ["a"]}, {"tier": "a"}, False),
        ({"key": "tier", "operator": "Exists"}, {"tier": ""}, True),
        ({"key": "tier", "operator": "Exists"}, {}, False),
        ({"key": "tier", "operator": "DoesNotExist"}, {}, True),
        ({"key": "tier", "operator": "DoesNotExist"}, {"tier": "a"}, False),
        ({"key": "tier", "operator": "Gt", "values": ["1"]}, {"tier": "2"}, False),  # unknown
    ],
)
def test_match_expressions_select_as_kubernetes_does(
    expression: dict[str, Any], labels: dict[str, str], selects: bool
) -> None:
    selector = {"matchLabels": {"app": "web"}, "matchExpressions": [expression]}
    owner = owners.facts("DaemonSet", obj("ds", "ds-uid", selector=selector))
    child = owners.facts(
        "Pod",
        obj("ds-x", "p", labels={"app": "web", **labels}, owner=ref("DaemonSet", "ds", "ds-uid")),
    )
    got = owners.drive(child, ALL, {Want("DaemonSet", "shop", "ds", "ds-uid"): owner})
    assert got.proven is selects, got


def test_an_empty_selector_claims_nothing() -> None:
    got = owners.drive(
        pod(owner=ref("Deployment", "web", "dep-uid")), ALL, cluster(Deployment=deployment({}))
    )
    assert got.why == owners.UNCLAIMED


def test_a_statefulsets_pod_is_selected_and_named_after_it() -> None:
    sts = owners.facts("StatefulSet", obj("db", "s", selector={"matchLabels": {"app": "db"}}))
    read: dict[Want, Facts | str] = {Want("StatefulSet", "shop", "db", "s"): sts}
    for name, proven in (("db-0", True), ("db-12", True), ("payments-0", False), ("db-x", False)):
        child = owners.facts(
            "Pod", obj(name, "p", labels={"app": "db"}, owner=ref("StatefulSet", "db", "s"))
        )
        assert owners.drive(child, ALL, read).proven is proven, name


def test_a_replication_controllers_map_selector() -> None:
    rc = owners.facts("ReplicationController", obj("rc", "r", selector={"app": "old"}))
    read: dict[Want, Facts | str] = {Want("ReplicationController", "shop", "rc", "r"): rc}
    for labels, proven in (({"app": "old"}, True), ({"app": "new"}, False), ({}, False)):
        child = owners.facts(
            "Pod", obj("rc-a", "p", labels=labels, owner=ref("ReplicationController", "rc", "r"))
        )
        assert owners.drive(child, ALL, read).proven is proven, labels


@pytest.mark.parametrize("label", owners.JOB_UID_LABELS)
def test_a_jobs_pod_carries_the_jobs_uid(label: str) -> None:
    selector = {"matchLabels": {label: "job-uid"}}
    job = owners.facts("Job", obj("backup", "job-uid", selector=selector))
    read: dict[Want, Facts | str] = {Want("Job", "shop", "backup", "job-uid"): job}
    mine = owners.facts(
        "Pod",
        obj("backup-a", "p", labels={label: "job-uid"}, owner=ref("Job", "backup", "job-uid")),
    )
    assert owners.drive(mine, ALL, read).proven
    # a manual selector the Pod matches, without the Job's uid: not proven
    manual = owners.facts("Job", obj("backup", "job-uid", selector={"matchLabels": {"a": "b"}}))
    forged = owners.facts(
        "Pod", obj("backup-b", "p", labels={"a": "b"}, owner=ref("Job", "backup", "job-uid"))
    )
    got = owners.drive(forged, ALL, {Want("Job", "shop", "backup", "job-uid"): manual})
    assert got.why == owners.UNCLAIMED


def test_a_cronjob_claims_its_active_jobs_or_its_named_and_labelled_ones() -> None:
    def cronjob(active: list[str], labels: dict[str, str]) -> Facts:
        return owners.facts(
            "CronJob",
            obj(
                "nightly",
                "cj-uid",
                spec={"jobTemplate": {"metadata": {"labels": labels}}},
                status={"active": [{"kind": "Job", "name": "x", "uid": u} for u in active]},
            ),
        )

    def job(name: str, uid: str, labels: dict[str, str]) -> Facts:
        return owners.facts(
            "Job", obj(name, uid, labels=labels, owner=ref("CronJob", "nightly", "cj-uid"))
        )

    want = Want("CronJob", "shop", "nightly", "cj-uid")
    cases = [
        (cronjob(["j1"], {}), job("anything", "j1", {}), True),  # in status.active
        (cronjob([], {"team": "a"}), job("nightly-29000000", "j2", {"team": "a"}), True),
        (cronjob([], {"team": "a"}), job("nightly-29000000", "j2", {}), False),  # no labels
        (cronjob([], {"team": "a"}), job("payments-1", "j2", {"team": "a"}), False),  # name
        (cronjob([], {}), job("nightly-29000000", "j2", {}), False),  # nothing to prove by
    ]
    for owner, child, proven in cases:
        assert owners.drive(child, ALL, {want: owner}).proven is proven, (owner, child)


def test_the_table_of_kinds_gives_each_kinds_path_and_group() -> None:
    assert owners.KINDS["Deployment"].prefix == "/apis/apps/v1"
    assert owners.KINDS["Pod"].prefix == "/api/v1" and owners.KINDS["Pod"].api_version == "v1"
    assert not owners.KINDS["Node"].namespaced
    assert owners.CLAIMS <= set(owners.KINDS)
    assert owners.group_of("batch/v1") == "batch" and owners.group_of("v1") == ""


def test_facts_are_counted_in_bytes_and_keep_labels_only_when_asked() -> None:
    big = obj("p", "u", labels={f"k{i}": "v" * 60 for i in range(20)})
    kept = owners.facts("Pod", big)
    left = owners.facts("Pod", big, keep_labels=False)
    assert left.labels == {} and kept.size() > left.size() + 20 * 60
