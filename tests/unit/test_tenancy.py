"""The tenant's word (docs/design.md, "The tenant's word"): one table of Events, run against the
one rule (``k8s_event_common.tenancy``) and every program that applies it: the bridge (its
CloudEvent, its NATS subject, its enrichment's reads and values), the OTLP mapping, the alerting
labels and the remediation worker. For a foreign reference, no name, uid, node or namespace of
the victim's appears anywhere in any of their outputs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.core.converting import Converter
from k8s_event_common import tenancy
from k8s_event_consumer.alerting.alerts import Rules, State
from k8s_event_consumer.consuming import Delivery, Discard
from k8s_event_consumer.events import decode
from k8s_event_consumer.otlp import mapping
from k8s_event_consumer.remediation.worker import UNTRUSTED
from tests import support
from tests.support import Reader
from tests.unit.test_enrichment import Rig, settings
from tests.unit.test_remediation import FakeKube, worker
from tests.virtualtime import virtual_time

TENANT = "tenant-a"
VICTIM = "victim-ns"
VICTIM_POD = "victim-pod-7f9"
VICTIM_UID = "victim-uid-0001"
VICTIM_NODE = "victim-node-3"
VICTIM_CONTAINER = "victim-ctr"
VICTIM_LABELS = ("victim-team", "victim-app")  # values only the victim's objects carry
VICTIM_STRINGS = (VICTIM, VICTIM_POD, VICTIM_UID, VICTIM_NODE, VICTIM_CONTAINER, *VICTIM_LABELS)
T0 = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC)
STORED = datetime(2026, 12, 4, 10, 0, 3, tzinfo=UTC)

# the worker reads the Event back (a trusted Pod reference), refuses it before any read (why),
# or ignores it (not a Pod)
READS, IGNORED = "reads", "ignored"


def pod_ref(namespace: str, name: str, uid: str, **more: Any) -> dict[str, Any]:
    ref = {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": name, "uid": uid}
    return ref | more


def node_ref(name: str, namespace: str = "") -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1", "namespace": namespace, "name": name, "uid": name}


def core(namespace: str, involved: dict[str, Any], host: str = "", **fields: Any) -> dict[str, Any]:
    """A core/v1 Event written with eventTime set (the API server then checks no namespace)."""
    obj = support.event(
        "ev-1.abc",
        7,
        namespace=namespace,
        uid="ev-uid-1",
        count=5,
        event_time=T0,
        last=T0,
        message="Back-off restarting failed container",
        involved_object=involved,
        source={"component": "kubelet", "host": host} if host else {},
        reportingComponent="tenant-writer",
        reportingInstance="tenant-writer-1",
        action="Pulling",
        **fields,
    )
    obj["involvedObject"] = involved  # as given, no key added
    return obj


def events_k8s_io(namespace: str, regarding: dict[str, Any], related: dict[str, Any]) -> dict:
    """An Event in the events.k8s.io/v1 shape (regarding, related, note)."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": "ev-1.abc",
            "namespace": namespace,
            "uid": "ev-uid-1",
            "resourceVersion": "7",
        },
        "eventTime": "2026-12-04T10:00:00.000000Z",
        "series": {"count": 5, "lastObservedTime": "2026-12-04T10:00:00.000000Z"},
        "reportingController": "tenant-writer",
        "reportingInstance": "tenant-writer-1",
        "action": "Pulling",
        "reason": "BackOff",
        "type": "Warning",
        "note": "Back-off restarting failed container",
        "regarding": regarding,
        "related": related,
    }


@dataclass(frozen=True)
class Case:
    event: dict[str, Any]
    why: str  # the rule's verdict on the involved object
    mark: str  # the mark every program writes ("" none)
    name: str  # the involved object's name the outputs give ("" none)
    namespace: str  # the OTLP resource's k8s.namespace.name ("" left out)
    reads: tuple[str, ...]  # what the enrichment reads
    worker: str  # READS, IGNORED or the worker's untrusted why
    secret: tuple[str, ...] = ()  # strings no output may hold
    # OTLP resource attributes the case must have
    resource: dict[str, str] = field(default_factory=dict)


TENANT_POD = f"/api/v1/namespaces/{TENANT}/pods/web-1"
FOREIGN = "object:" + tenancy.OTHER_NAMESPACE

CASES: dict[str, Case] = {
    "same_namespace_pod": Case(
        core(TENANT, pod_ref(TENANT, "web-1", "p1", fieldPath="spec.containers{app}"), "node-1"),
        tenancy.SAME_NAMESPACE,
        "",
        "web-1",
        TENANT,
        (TENANT_POD,),
        READS,
        resource={"k8s.pod.uid": "p1", "k8s.node.name": "node-1", "k8s.container.name": "app"},
    ),
    "pod_of_another_namespace_with_event_time": Case(
        core(
            TENANT,
            pod_ref(
                VICTIM, VICTIM_POD, VICTIM_UID, fieldPath=f"spec.containers{{{VICTIM_CONTAINER}}}"
            ),
            VICTIM_NODE,
        ),
        tenancy.OTHER_NAMESPACE,
        FOREIGN,
        "",
        TENANT,
        (),
        "reference_untrusted",
        VICTIM_STRINGS,
    ),
    "node_from_default": Case(
        core("default", node_ref("node-1")),
        tenancy.CLUSTER_NAMESPACE,
        "",
        "node-1",
        "",
        ("/api/v1/nodes/node-1",),
        IGNORED,
        resource={"k8s.node.name": "node-1", "k8s.node.uid": "node-1"},
    ),
    "node_from_kube_system": Case(  # trusted; enrich.object.cluster_namespaces reads none
        core("kube-system", node_ref("node-1")),
        tenancy.CLUSTER_NAMESPACE,
        "",
        "node-1",
        "",
        (),
        IGNORED,
    ),
    "node_from_a_tenant_namespace": Case(
        core(TENANT, node_ref(VICTIM_NODE), VICTIM_NODE),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM_NODE, "victim-node-app"),
    ),
    "node_in_the_tenants_namespace": Case(
        core(TENANT, node_ref(VICTIM_NODE, TENANT)),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM_NODE, "victim-node-app"),
    ),
    "its_own_namespace_object": Case(
        core(TENANT, {"kind": "Namespace", "apiVersion": "v1", "name": TENANT, "uid": "ns-a"}),
        tenancy.OWN_NAMESPACE,
        "",
        TENANT,
        TENANT,
        (),
        IGNORED,
        resource={"k8s.namespace.uid": "ns-a"},
    ),
    # a kind spelled in another case (the OTLP mapping folds it): still a Node, a Namespace
    "node_spelled_lower_in_the_tenants_namespace": Case(
        core(TENANT, {**node_ref(VICTIM_NODE, TENANT), "kind": "node"}),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM_NODE, "victim-node-app"),
    ),
    "node_spelled_upper_with_a_blank": Case(
        core(TENANT, {**node_ref(VICTIM_NODE, TENANT), "kind": "NODE "}),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM_NODE, "victim-node-app"),
    ),
    "node_spelled_full_width": Case(
        core(TENANT, {**node_ref(VICTIM_NODE, TENANT), "kind": "\uff2e\uff2f\uff24\uff25"}),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM_NODE, "victim-node-app"),
    ),
    "node_spelled_with_invisible_and_control_characters": Case(
        core(TENANT, {**node_ref(VICTIM_NODE, TENANT), "kind": "No\tde\u200b\x00"}),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM_NODE, "victim-node-app"),
    ),
    "another_namespace_object_spelled_lower": Case(
        core(
            TENANT,
            {
                "kind": "namespace",
                "apiVersion": "v1",
                "namespace": TENANT,
                "name": VICTIM,
                "uid": VICTIM_UID,
            },
        ),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM, VICTIM_UID, "victim-team"),
    ),
    "another_namespace_object": Case(
        core(TENANT, {"kind": "Namespace", "apiVersion": "v1", "name": VICTIM, "uid": VICTIM_UID}),
        tenancy.CLUSTER_SCOPED,
        "object:" + tenancy.CLUSTER_SCOPED,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM, VICTIM_UID),
    ),
    "a_namespace_object_from_default": Case(
        core("default", {"kind": "Namespace", "apiVersion": "v1", "name": TENANT, "uid": "ns-a"}),
        tenancy.CLUSTER_NAMESPACE,
        "",
        TENANT,
        TENANT,  # the semantic conventions' k8s.namespace.name of a Namespace: its name
        (),
        IGNORED,
    ),
    "a_namespaced_kind_without_a_namespace": Case(
        core(TENANT, pod_ref("", "web-1", "p1")),
        tenancy.NAMESPACE_IMPLIED,
        "",
        "web-1",
        TENANT,
        (TENANT_POD,),
        "reference_untrusted",  # the worker acts only on a Pod that names the namespace
    ),
    "events_k8s_io_regarding_and_related_elsewhere": Case(
        events_k8s_io(
            TENANT, pod_ref(VICTIM, VICTIM_POD, VICTIM_UID), pod_ref(VICTIM, VICTIM_POD, VICTIM_UID)
        ),
        tenancy.OTHER_NAMESPACE,
        f"{FOREIGN},related:{tenancy.OTHER_NAMESPACE}",
        "",
        TENANT,
        (),
        "reference_untrusted",
        VICTIM_STRINGS,
    ),
    "events_k8s_io_in_its_namespace": Case(
        events_k8s_io(TENANT, pod_ref(TENANT, "web-1", "p1"), pod_ref(TENANT, "web-2", "p2")),
        tenancy.SAME_NAMESPACE,
        "",
        "web-1",
        TENANT,
        (TENANT_POD,),
        READS,
    ),
    "related_only_elsewhere": Case(
        core(
            TENANT,
            pod_ref(TENANT, "web-1", "p1"),
            related=pod_ref(VICTIM, VICTIM_POD, VICTIM_UID),
        ),
        tenancy.SAME_NAMESPACE,
        f"related:{tenancy.OTHER_NAMESPACE}",
        "web-1",
        TENANT,
        (TENANT_POD,),
        READS,
        VICTIM_STRINGS,
    ),
    "an_unknown_kind_in_its_namespace": Case(
        core(
            TENANT,
            {
                "kind": "Widget",
                "apiVersion": "example.com/v1",
                "namespace": TENANT,
                "name": "w-1",
                "uid": "w1",
            },
        ),
        tenancy.SAME_NAMESPACE,
        "",
        "w-1",
        TENANT,
        (),
        IGNORED,
    ),
    "an_unknown_kind_without_a_namespace": Case(
        core(
            TENANT,
            {
                "kind": "Widget",
                "apiVersion": "example.com/v1",
                "name": "victim-widget",
                "uid": VICTIM_UID,
            },
        ),
        tenancy.NO_NAMESPACE,
        "object:" + tenancy.NO_NAMESPACE,
        "",
        TENANT,
        (),
        IGNORED,
        ("victim-widget", VICTIM_UID),
    ),
    "an_unknown_kind_of_another_namespace": Case(
        core(
            TENANT,
            {
                "kind": "Widget",
                "apiVersion": "example.com/v1",
                "namespace": VICTIM,
                "name": "victim-widget",
                "uid": VICTIM_UID,
            },
        ),
        tenancy.OTHER_NAMESPACE,
        FOREIGN,
        "",
        TENANT,
        (),
        IGNORED,
        (VICTIM, "victim-widget", VICTIM_UID),
    ),
    "odd_names_of_another_namespace": Case(
        core(TENANT, pod_ref("victim.ns*>", "victim pod/../x.*", "victim-uid \u2028"), "vic.node>"),
        tenancy.OTHER_NAMESPACE,
        FOREIGN,
        "",
        TENANT,
        (),
        "reference_untrusted",
        ("victim.ns", "victim pod", "victim-uid", "vic.node"),
    ),
    "an_odd_name_in_its_namespace": Case(
        core(TENANT, pod_ref(TENANT, "web 1.*>", "p1")),
        tenancy.SAME_NAMESPACE,
        "",
        "web 1.*>",
        TENANT,
        (),  # not an object name: never read
        "bad_name",
    ),
}


def test_the_rule_decides_each_case() -> None:
    for name, case in CASES.items():
        got = tenancy.of_event(case.event)
        assert got.involved.why == case.why, name
        assert got.involved.trusted == (case.why in tenancy.TRUSTED), name
        assert got.namespace == case.event["metadata"]["namespace"], name
        assert got.mark == case.mark, name


def test_the_rule_is_the_api_servers_where_it_checks() -> None:
    """What legacyValidateEvent takes without eventTime is trusted; what it refuses is not."""
    ref = tenancy.reference
    assert ref("shop", "Pod", "shop").trusted  # the namespaces agree
    assert ref("default", "Node", "").trusted and ref("kube-system", "Node", "").trusted
    assert not ref("shop", "Pod", "kube-system").trusted  # refused without eventTime
    assert not ref("shop", "Node", "").trusted  # refused with and without eventTime
    assert ref("shop", "Pod", "kube-system").namespace == "shop"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
    elif value is not None:
        yield str(value)


def _reader() -> Reader:
    """Both namespaces, their Pods and Nodes, each labelled with what only it carries."""
    reader = Reader()
    reader.namespaces = [
        {"metadata": {"name": TENANT, "resourceVersion": "1", "labels": {"team": "team-a"}}},
        {"metadata": {"name": VICTIM, "resourceVersion": "1", "labels": {"team": "victim-team"}}},
        {"metadata": {"name": "default", "resourceVersion": "1", "labels": {"team": "ops"}}},
        {"metadata": {"name": "kube-system", "resourceVersion": "1", "labels": {"team": "ops"}}},
    ]
    for kind, ns, name, uid, app in (
        ("Pod", TENANT, "web-1", "p1", "web-app"),
        ("Pod", VICTIM, VICTIM_POD, VICTIM_UID, "victim-app"),
        ("Node", "", "node-1", "node-1", "node-app"),
        ("Node", "", VICTIM_NODE, VICTIM_NODE, "victim-node-app"),
    ):
        meta = {"name": name, "uid": uid, "labels": {"app": app}} | (
            {"namespace": ns} if ns else {}
        )
        reader.add(kind, {"metadata": meta})
    return reader


@dataclass
class Outputs:
    """What each program made of one Event."""

    subject: str
    cloudevent: dict[str, Any]  # its attributes (the data left out: the Event itself)
    reads: list[str]
    resource: dict[str, Any]
    record: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str]
    worker: str
    worker_reads: list[tuple[str, str, str]]

    def strings(self) -> list[str]:
        return list(
            _strings(
                [
                    self.subject,
                    self.cloudevent,
                    self.reads,
                    self.resource,
                    self.record,
                    self.labels,
                    self.annotations,
                    self.worker_reads,
                ]
            )
        )


async def outputs(case: Case) -> Outputs:
    s = settings(
        object={
            "labels": {"app": "app"},
            "owner_kind": "ownerkind",
            "owner_name": "ownername",
            "kinds": ["Pod", "Node"],
        }
    )
    reader = _reader()
    async with Rig(s, reader) as rig:
        await rig.intake.items([("ADDED", support.as_event(case.event), 7)])
        ((subject, ce),) = await rig.out(1)
    attrs = {k: v for k, v in ce.items() if k != "data"}

    msg = Converter("prod", "k8s.events", "structured").convert(case.event)
    decoded = decode(msg.subject, msg.headers, msg.payload)
    d = Delivery(decoded, 3, 1, STORED, msg.headers, msg.payload)
    m = mapping.mapped(d)
    record = {kv.key: mapping_value(kv.value) for kv in m.record.attributes}
    keys = [k for k, _ in m.resource]
    assert len(keys) == len(set(keys)), f"a resource key twice: {keys}"
    # the bridge's mark is its own extension, never taken for an enrichment's
    assert not [k for k in record if k.startswith("k8s_event_bridge.enrichment.k8s")], record

    ev = decoded.event
    assert ev is not None
    (alert,) = State(Rules(), clock=lambda: STORED).event(ev)

    kube = FakeKube()
    w, _ = worker(kube)
    try:
        await w.on_event(ev, d)
    except Discard:
        pass  # acked as untrusted: which why, below
    whys = [why for why in UNTRUSTED if w.metrics.value("untrusted_total", why=why)]
    if kube.reads:
        result = READS  # a trusted Pod: the Event read back (this fake has none of it)
    else:
        result = whys[0] if whys else IGNORED
    return Outputs(
        subject=subject,
        cloudevent=attrs,
        reads=list(reader.reads),
        resource=dict(m.resource),
        record=record,
        labels=dict(alert.labels),
        annotations=dict(alert.annotations),
        worker=result,
        worker_reads=list(kube.reads),
    )


def mapping_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [mapping_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: mapping_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


@pytest.mark.parametrize("name", list(CASES))
@virtual_time
async def test_every_program_takes_the_events_namespace_and_names_no_foreign_object(
    name: str,
) -> None:
    case = CASES[name]
    ns = case.event["metadata"]["namespace"]
    inv = tenancy.involved_of(case.event)
    kind = inv["kind"]
    out = await outputs(case)

    # the bridge: its CloudEvent, its subject, its enrichment
    assert out.cloudevent["k8snamespace"] == ns
    assert out.cloudevent["source"] == f"k8s://prod/namespaces/{ns}"
    assert out.cloudevent["k8sname"] == case.name
    assert out.cloudevent["subject"] == f"{kind}/{case.name}"
    assert out.cloudevent.get("k8suntrusted", "") == case.mark
    tokens = out.subject.split(".")
    # k8s.events.{cluster}.{team}.{namespace}.{kind}.{reason}: the team of the Event's namespace
    assert tokens[:3] == ["k8s", "events", "prod"] and len(tokens) == 7
    assert tokens[3:5] == [{TENANT: "team-a"}.get(ns, "ops"), ns]
    assert out.reads == list(case.reads)
    if not case.reads:
        assert "app" not in out.cloudevent and "ownername" not in out.cloudevent

    # the OTLP record
    res, rec = out.resource, out.record
    assert res.get("k8s.namespace.name", "") == case.namespace
    # the record's, as the receiver has it: none for a trusted cluster-scoped object
    cluster_scoped = case.why == tenancy.CLUSTER_NAMESPACE
    assert rec.get("k8s.namespace.name", "") == ("" if cluster_scoped else ns)
    assert res.get("k8s.object.name", "") == case.name
    assert res["k8s.object.kind"] == kind
    assert rec.get("k8s_event_bridge.untrusted", []) == [m for m in case.mark.split(",") if m]
    for key, want in case.resource.items():
        assert res.get(key) == want, key
    if case.why in tenancy.FOREIGN:
        assert not {"k8s.object.uid", "k8s.node.name", "k8s.container.name"} & set(res)
        assert not [k for k in res if k.startswith(("k8s.pod.", "k8s.node."))]
        assert "cloudevents.event_subject" not in rec

    # the alert
    assert out.labels["namespace"] == ns
    assert out.labels.get("name", "") == case.name
    assert out.labels.get("untrusted", "") == case.mark

    # the worker
    assert out.worker == case.worker
    if case.worker == READS:
        assert out.worker_reads[0] == ("Event", ns, "ev-1.abc")
    elif case.worker != IGNORED:
        assert out.worker_reads == []

    # and nowhere a victim's string
    for secret in case.secret:
        leaked = [s for s in out.strings() if secret in s]
        assert leaked == [], f"{secret!r} in {leaked}"


def test_the_mark_rides_in_either_content_mode_and_the_subscribers_judge_it_themselves() -> None:
    case = CASES["events_k8s_io_regarding_and_related_elsewhere"]
    msg = Converter("prod", "k8s.events", "binary").convert(case.event)
    assert msg.headers is not None and msg.headers["ce-k8suntrusted"] == case.mark
    # a message that leaves the mark out (or lies about it) changes nothing downstream
    del msg.headers["ce-k8suntrusted"]
    decoded = decode(msg.subject, msg.headers, msg.payload)
    assert decoded.event is not None and decoded.event.tenancy.mark == case.mark
