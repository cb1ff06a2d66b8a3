"""The enrichment: what it reads, what it holds, and that no lookup ever holds an Event."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from bridge import errors
from bridge.core import events
from bridge.core.converting import Converter
from bridge.core.enrichment import (
    INVALID,
    KIND,
    Enrichment,
    LookupCache,
    ObjectInfo,
    Plan,
    object_path,
)
from bridge.core.filtering import Filter
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.metrics import Metrics
from bridge.runtime import namespaces
from bridge.runtime.enriching import Enricher
from bridge.runtime.intake import Intake
from bridge.runtime.staging import Converting
from bridge.settings import EnrichSettings, FilterSettings, Settings
from k8s_event_common import cloudevents, owners
from k8s_event_common.clock import Clock
from tests import support
from tests.support import Reader
from tests.virtualtime import LOOP, virtual_time

TEMPLATE = "{cluster}.{team}.{namespace}.{kind}.{reason}"


def settings(**enrich: Any) -> Settings:
    e = {
        "namespace": {"labels": {"team": "team"}, "annotations": {"example.com/oncall": "oncall"}},
        "object": {
            "labels": {"app": "app"},
            "owner_kind": "ownerkind",
            "owner_name": "ownername",
        },
        "lookup_timeout": 5.0,
    }
    e.update(enrich)
    return Settings(enrich=e, nats={"subject_template": TEMPLATE})


def obj(
    kind: str, name: str, uid: str, *, labels=None, owner=None, ns="shop", selector=None
) -> dict[str, Any]:
    """An object as the API server has it; ``selector``: its spec.selector.matchLabels (a
    controller's claim on its children)."""
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid, "labels": labels or {}}
    out: dict[str, Any] = {"metadata": meta}
    if selector is not None:
        out["spec"] = {"selector": {"matchLabels": selector}}
    if owner is not None:
        okind, oname, ouid = owner
        api = owners.KINDS[okind].api_version if okind in owners.KINDS else "example.com/v1"
        meta["ownerReferences"] = [
            {"kind": "Other", "name": "x", "uid": "o", "apiVersion": "v1"},  # not the controller
            {
                "kind": okind,
                "name": oname,
                "uid": ouid,
                "apiVersion": api,
                "controller": True,
            },
        ]
    return out


def ns(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": labels}}


def event(name: str, pod: str, *, uid: str = "", rv: int = 1, namespace: str = "shop", **inv):
    return support.as_event(event_obj(name, pod, uid=uid, rv=rv, namespace=namespace, **inv))


def event_obj(name: str, pod: str, *, uid: str = "", rv: int = 1, namespace: str = "shop", **inv):
    """An Event of the Pod ``pod`` (its uid ``uid``), the involved object as the recorder
    writes it (namespace, uid, apiVersion), ``inv`` added to it."""
    involved = {"namespace": namespace, "uid": uid, "apiVersion": "v1", **inv}
    return support.event(
        name, rv, namespace=namespace, uid=f"e-{name}", involved=pod, involved_object=involved
    )


def cluster(reader: Reader) -> None:
    """shop (team payments): Deployment web → ReplicaSet web-1 → Pod web-1-a."""
    reader.namespaces = [ns("shop", team="payments"), ns("blog", team="content")]
    rs = {"app": "web", "pod-template-hash": "1"}
    reader.add("Deployment", obj("Deployment", "web", "d1", selector={"app": "web"}))
    reader.add(
        "ReplicaSet",
        obj("ReplicaSet", "web-1", "r1", labels=rs, selector=rs, owner=("Deployment", "web", "d1")),
    )
    reader.add("Pod", obj("Pod", "web-1-a", "p1", labels=rs, owner=("ReplicaSet", "web-1", "r1")))


class Rig:
    def __init__(self, s: Settings, reader: Reader, clock: Clock = LOOP) -> None:
        self.metrics = Metrics()
        self.queue: BoundedQueue[Any] = BoundedQueue(100, 1 << 20)
        self.converter = Converter("prod", "k8s.events", "structured", s.nats.subject_template)
        out = Converting(self.converter, self.queue, self.metrics)
        self.enricher = Enricher(s, reader, out, self.metrics, clock)
        self.progress = Progress(0)
        self.intake = Intake(
            "*",
            self.progress,
            Filter(FilterSettings()),
            self.converter,
            self.enricher,
            self.metrics,
            clock,
        )
        self.tasks: list[asyncio.Task[Any]] = []
        self.namespace_watch = namespaces.watcher(
            reader.source, self.enricher, s.kubernetes, self.metrics
        )

    async def __aenter__(self) -> Rig:
        self.tasks = [
            asyncio.create_task(self.enricher.run()),
            asyncio.create_task(self.namespace_watch.run()),
        ]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.enricher.close()

    async def out(self, n: int) -> list[tuple[str, dict[str, Any]]]:
        got = []
        for _ in range(n):
            o = await asyncio.wait_for(self.queue.get(), 30)
            o.entry.settle()
            got.append((o.msg.subject, json.loads(o.msg.payload)))
        return got


def extensions(ce: dict[str, Any]) -> dict[str, Any]:
    core = {"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "data"}
    return {k: v for k, v in ce.items() if k not in core and not k.startswith("k8s")} | {
        k: v for k, v in ce.items() if k in ("k8senriched", "k8senrichmissing")
    }


# -- the plan ------------------------------------------------------------------------------------


def test_target_reads_only_allowed_kinds_by_valid_names_in_the_events_namespace():
    plan = Plan(EnrichSettings(object={"labels": {"app": "app"}, "kinds": ["Pod", "Node"]}))
    assert plan.target("shop", "Pod", "shop", "web-1") == ("Pod", "shop", "web-1")
    assert plan.target("shop", "Pod", "", "web-1") == ("Pod", "shop", "web-1")
    assert plan.target("default", "Node", "", "n1") == ("Node", "", "n1")
    assert plan.target("shop", "Deployment", "shop", "web") == KIND  # not in kinds
    assert plan.target("shop", "Pod", "shop", "web", "example.com/v1") == KIND  # other group
    # another namespace than the Event's: an Event can not make the bridge read elsewhere
    assert plan.target("shop", "Pod", "kube-system", "etcd") == INVALID
    # no Pod, Node or workload has a name that is not a DNS-1123 subdomain (its read path)
    for bad in ("../secrets", "a/b", "%2e%2e", "", ".", "x" * 300, "web?watch=1", "Web", "w_1", 7):
        assert plan.target("shop", "Pod", "shop", bad) == INVALID, bad
    assert plan.target("Shop!", "Pod", "", "web") == INVALID
    assert object_path(("Pod", "shop", "web-1")) == "/api/v1/namespaces/shop/pods/web-1"
    assert object_path(("Deployment", "shop", "web")) == (
        "/apis/apps/v1/namespaces/shop/deployments/web"
    )
    assert object_path(("Node", "", "n1")) == "/api/v1/nodes/n1"


def test_namespace_values_hold_only_the_named_keys():
    plan = Plan(
        EnrichSettings(namespace={"labels": {"team": "team"}, "annotations": {"a/o": "oncall"}})
    )
    got = plan.namespace_values(
        {"metadata": {"labels": {"team": "x", "other": "y"}, "annotations": {"a/o": "z" * 2000}}}
    )
    assert got["team"] == "x" and "other" not in got and got["oncall"] != "z" * 2000


def test_cache_is_bounded_by_count_and_bytes_and_keeps_stale_values():
    c = LookupCache(max_entries=3, max_bytes=10**6, ttl=10, negative_ttl=1)
    info = ObjectInfo("u", {}, None)
    for i in range(5):
        c.put(("Pod", "ns", f"p{i}"), info, now=0)
    assert len(c) == 3 and c.fresh(("Pod", "ns", "p0"), 0) == (False, None)
    assert c.fresh(("Pod", "ns", "p4"), 5) == (True, info)
    assert c.fresh(("Pod", "ns", "p4"), 11) == (False, None)  # past its TTL
    assert c.stale(("Pod", "ns", "p4")) is info  # still known while the API server is away
    c.put(("Pod", "ns", "gone"), None, now=0)
    assert c.fresh(("Pod", "ns", "gone"), 0.5) == (True, None)
    assert c.fresh(("Pod", "ns", "gone"), 2) == (False, None)  # a negative entry lives shorter
    small = LookupCache(max_entries=10**6, max_bytes=5000, ttl=10, negative_ttl=1)
    big = ObjectInfo("u", {f"k{i}": "v" * 60 for i in range(10)}, None)
    for i in range(100):
        small.put(("Pod", "ns", f"p{i}"), big, now=0)
    assert small.bytes <= 5000 and len(small) >= 1


# -- the enricher --------------------------------------------------------------------------------


@virtual_time
async def test_an_event_gets_its_namespace_labels_object_labels_and_top_controller():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "web-1-a", uid="p1"), 1)])
        [(subject, ce)] = await rig.out(1)
    assert subject == "k8s.events.prod.payments.shop.Pod.BackOff"
    assert extensions(ce) == {
        "team": "payments",
        "app": "web",
        "ownerkind": "Deployment",
        "ownername": "web",
        "k8senriched": "complete",
    }
    assert ce["data"]["involvedObject"]["name"] == "web-1-a"  # the Event itself untouched
    assert "team" not in json.dumps(ce["data"])
    # the SDK takes the extensions
    env = cloudevents.decode(
        {"Content-Type": "application/cloudevents+json"}, json.dumps(ce).encode()
    )
    assert env.attributes["team"] == "payments"


@virtual_time
async def test_one_read_per_object_however_many_events_and_cached_after():
    reader = Reader()
    cluster(reader)
    reader.hang.clear()
    async with Rig(settings(), reader) as rig:
        batch = [("ADDED", event(f"e{i}", "web-1-a", uid="p1", rv=i), i) for i in range(1, 51)]
        await rig.intake.items(batch)
        reader.hang.set()
        got = await rig.out(50)
        assert reader.reads.count("/api/v1/namespaces/shop/pods/web-1-a") == 1
        assert len(reader.reads) == 3  # the Pod, its ReplicaSet, their Deployment
        assert [ce["id"] for _, ce in got] == [f"e-e{i}/{i}" for i in range(1, 51)]  # in order
        await rig.intake.items([("ADDED", event("later", "web-1-a", uid="p1", rv=60), 60)])
        [(_, ce)] = await rig.out(1)
        assert ce["ownername"] == "web" and len(reader.reads) == 3  # from the cache
        hits = rig.metrics.enrich_cache.labels("hit")._value.get()
        assert hits >= 1


@virtual_time
async def test_a_hung_api_server_holds_no_event_beyond_the_lookup_timeout():
    """Reads that never answer: each Event goes out marked object:timeout, none is lost, the
    order is kept, and the Events behind the first wait no longer than it did."""
    reader = Reader()
    cluster(reader)
    reader.hang.clear()
    s = settings(lookup_timeout=0.2, max_inflight=2)
    async with Rig(s, reader) as rig:
        batch = [("ADDED", event(f"e{i}", f"pod-{i}", uid=f"u{i}", rv=i), i) for i in range(1, 21)]
        await rig.intake.items(batch)
        got = await rig.out(20)
    assert [ce["id"] for _, ce in got] == [f"e-e{i}/{i}" for i in range(1, 21)]
    for subject, ce in got:
        assert ce["k8senriched"] == "partial"
        assert ce["k8senrichmissing"] == "object:timeout"
        assert ce["team"] == "payments"  # the namespace's values need no read
        assert subject.startswith("k8s.events.prod.payments.shop.")
    assert reader.most_in_flight <= 2


@virtual_time
async def test_an_unreachable_api_server_pauses_reads_and_events_go_out_at_once():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "web-1-a", uid="p1", rv=1), 1)])
        await rig.out(1)  # web-1-a and its owners are cached now
        reader.fail = errors.KubeUnavailable("connection refused")
        rig.enricher.cache.ttl = 0.0  # every entry stale from now on
        batch = [("ADDED", event(f"n{i}", f"new-{i}", uid="x", rv=i), i) for i in range(2, 12)]
        batch.append(("ADDED", event("b", "web-1-a", uid="p1", rv=12), 12))
        await rig.intake.items(batch)
        got = await rig.out(11)
        # the reads already on their way when the first failed, at most max_inflight
        tried = len(reader.reads)
        assert sum(1 for r in reader.reads if "/pods/new-" in r) <= 8
        # once paused, no read is tried: the next Events go out at once, marked
        more = [("ADDED", event(f"m{i}", f"more-{i}", uid="y", rv=i), i) for i in range(20, 30)]
        await rig.intake.items(more)
        later = await rig.out(10)
        assert len(reader.reads) == tried
        assert {ce["k8senrichmissing"] for _, ce in later} == {"object:unreachable"}
    missing = [ce.get("k8senrichmissing") for _, ce in got]
    assert missing[:10] == ["object:unreachable"] * 10
    # what was known before (stale) still serves while the API server is away
    assert got[10][1]["ownername"] == "web" and got[10][1]["k8senriched"] == "complete"
    assert rig.metrics.enrich_missing.labels("object", "unreachable")._value.get() == 20


@pytest.mark.parametrize(
    ("fail", "why"),
    [
        (errors.Forbidden("pods is forbidden", status=403), "forbidden"),
        (errors.Unauthorized("Unauthorized", status=401), "forbidden"),
        (errors.KubeError("internal error", status=500), "error"),
    ],
)
@virtual_time
async def test_a_refused_read_publishes_the_event_marked(fail, why):
    reader = Reader()
    cluster(reader)
    reader.fail = fail
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "web-1-a", uid="p1"), 1)])
        [(_, ce)] = await rig.out(1)
    assert ce["k8senrichmissing"] == f"object:{why}" and "ownerkind" not in ce
    assert ce["team"] == "payments"
    assert reader.reloads == (1 if isinstance(fail, errors.Unauthorized) else 0)


@virtual_time
async def test_an_object_of_that_name_but_another_uid_is_not_the_events_object():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "web-1-a", uid="old-pod"), 1)])
        await rig.intake.items([("ADDED", event("b", "gone-pod", uid="g", rv=2), 2)])
        got = await rig.out(2)
    assert [ce["k8senrichmissing"] for _, ce in got] == ["object:notfound"] * 2
    assert all("app" not in ce for _, ce in got)


@virtual_time
async def test_an_owner_that_is_not_there_leaves_the_last_proven_object_as_top_unproven():
    reader = Reader()
    cluster(reader)
    del reader.objects["/apis/apps/v1/namespaces/shop/replicasets/web-1"]
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "web-1-a", uid="p1"), 1)])
        [(_, ce)] = await rig.out(1)
    # the Pod's reference alone proves nothing: the Pod itself is the last proven object
    assert (ce["ownerkind"], ce["ownername"]) == ("Pod", "web-1-a")
    assert ce["k8senrichmissing"] == "owner:unproven" and ce["app"] == "web"


@virtual_time
async def test_an_owner_that_can_not_be_read_leaves_the_last_proven_owner_as_top():
    reader = Reader()
    cluster(reader)
    get = reader.get_object

    async def forbidding(path: str) -> dict[str, Any]:
        if path == "/apis/apps/v1/namespaces/shop/deployments/web":
            raise errors.Forbidden("403 deployments is forbidden")
        return await get(path)

    reader.get_object = forbidding  # type: ignore[method-assign]
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "web-1-a", uid="p1"), 1)])
        [(_, ce)] = await rig.out(1)
    assert (ce["ownerkind"], ce["ownername"]) == ("ReplicaSet", "web-1")
    assert ce["k8senrichmissing"] == "owner:forbidden"


@virtual_time
async def test_a_kind_not_read_and_an_event_naming_another_namespace_are_marked():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader) as rig:
        node = event("n", "node-1", kind="Node", namespace="shop")
        forged = event("f", "etcd", namespace="shop")
        forged.view.involvedObject.namespace = "kube-system"
        await rig.intake.items([("ADDED", node, 1), ("ADDED", forged, 2)])
        got = await rig.out(2)
    # a Node named from a tenant's namespace: the one rule refuses it before the kinds do
    assert got[0][1]["k8senrichmissing"] == "object:scope"
    assert got[1][1]["k8senrichmissing"] == "object:invalid"
    assert not [r for r in reader.reads if "kube-system" in r]


@virtual_time
async def test_namespaces_follow_the_watch_and_an_unknown_one_is_marked():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "p", namespace="blog"), 1)])
        [(subject, ce)] = await rig.out(1)
        assert ce["team"] == "content" and subject.split(".")[3] == "content"
        await reader.watch_lines.put([("MODIFIED", ns("blog", team="media"))])
        await reader.watch_lines.put([("ADDED", ns("new", team="infra"))])
        await reader.watch_lines.put([("DELETED", ns("shop"))])
        while rig.enricher.namespaces.get("new") is None:
            await asyncio.sleep(0.01)
        batch = [
            ("ADDED", event("b", "p", namespace="blog", rv=2), 2),
            ("ADDED", event("c", "p", namespace="new", rv=3), 3),
            ("ADDED", event("d", "p", namespace="shop", rv=4), 4),
        ]
        await rig.intake.items(batch)
        got = await rig.out(3)
    assert [ce.get("team") for _, ce in got] == ["media", "infra", None]
    assert got[2][0] == "k8s.events.prod._.shop.Pod.BackOff"  # a missing value is _
    assert "namespace:unknown" in got[2][1]["k8senrichmissing"]


@virtual_time
async def test_a_410_on_the_namespace_watch_relists():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader):
        while reader.lists < 1:
            await asyncio.sleep(0.01)
        await reader.watch_lines.put([("ERROR", {"code": 410, "message": "too old"})])
        while reader.lists < 2:
            await asyncio.sleep(0.01)


@virtual_time
async def test_a_conversion_failure_after_the_wait_marks_its_entry_done():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader) as rig:
        bad = events.from_obj(
            {"metadata": {"namespace": "shop", "resourceVersion": "5"}, "reason": "BackOff"}
        )
        await rig.intake.items([("ADDED", bad, 5), ("ADDED", event("a", "x", rv=6), 6)])
        got = await rig.out(1)
    assert got[0][1]["id"] == "e-a/6"
    assert rig.progress.safe_rv == 6


def test_enrichment_attributes():
    assert Enrichment({"team": "a"}).attributes() == {"team": "a", "k8senriched": "complete"}
    e = Enrichment()
    e.miss("object", "timeout")
    e.miss("object", "timeout")
    e.miss("namespace", "unknown")
    assert e.attributes() == {
        "k8senriched": "partial",
        "k8senrichmissing": "object:timeout,namespace:unknown",
    }


def test_binary_mode_carries_the_extensions_as_headers():
    c = Converter("prod", "k8s.events", "binary", TEMPLATE)
    msg = c.convert(event("a", "p"), Enrichment({"team": "pay ments\r\nX: y"}, ["object:timeout"]))
    h = msg.headers
    assert h["ce-team"] == "pay%20ments%0D%0AX:%20y"  # no header can be forged
    assert h["ce-k8senriched"] == "partial"
    assert msg.subject == "k8s.events.prod._pay_20ments_0d_0aX_3a_20y.shop.Pod.BackOff"
    env = cloudevents.decode(h, msg.payload)
    assert env.attributes["team"] == "pay ments\r\nX: y"


def test_the_bridge_reserves_the_attributes_the_subscribers_read_by():
    from bridge.settings import RESERVED_ATTRIBUTES

    assert RESERVED_ATTRIBUTES == cloudevents.CORE_ATTRIBUTES | cloudevents.BRIDGE_ATTRIBUTES


def test_the_metrics_know_every_part_and_why():
    from bridge import metrics
    from bridge.core import enrichment

    assert metrics.ENRICH_PARTS == enrichment.PARTS
    assert metrics.ENRICH_WHYS == enrichment.WHYS


def test_a_tenant_written_value_routes_only_when_opted_in():
    e = {"object": {"labels": {"app": "app"}, "owner_name": "owner"}}
    template = "{cluster}.{namespace}.{app}.{owner}.{reason}"
    with pytest.raises(ValidationError, match=r"\{app\} is a value the tenant writes"):
        Settings(enrich=e, nats={"subject_template": template})
    with pytest.raises(ValidationError, match=r"\{owner\} is a value the tenant writes"):
        Settings(enrich={**e, "tenant_tokens": ["app"]}, nats={"subject_template": template})
    s = Settings(
        enrich={**e, "tenant_tokens": ["app", "owner"]}, nats={"subject_template": template}
    )
    assert s.enrich.tenant_tokens == ["app", "owner"]
    # a namespace label needs no opt-in: whoever may edit Namespaces writes it
    Settings(
        enrich={"namespace": {"labels": {"team": "team"}}}, nats={"subject_template": TEMPLATE}
    )


@virtual_time
async def test_an_event_without_the_objects_uid_or_about_a_node_elsewhere_gets_none_of_its_values():
    reader = Reader()
    cluster(reader)
    reader.add("Node", {"metadata": {"name": "n1", "uid": "n-uid", "labels": {"app": "node"}}})
    s = settings(object={"labels": {"app": "app"}, "kinds": ["Pod", "Node"]})
    async with Rig(s, reader) as rig:
        await rig.intake.items(
            [
                ("ADDED", event("a", "web-1-a", uid=""), 1),  # no uid: which web-1-a?
                ("ADDED", event("b", "n1", uid="n-uid", kind="Node", namespace="shop"), 2),
                ("ADDED", event("c", "n1", uid="n-uid", kind="Node", namespace="default"), 3),
            ]
        )
        got = [ce for _, ce in await rig.out(3)]
    assert got[0]["k8senrichmissing"] == "object:nouid" and "app" not in got[0]
    assert got[1]["k8senrichmissing"] == "object:scope" and "app" not in got[1]
    # the kubelet's and the node controllers' namespace: the Node's values
    assert got[2].get("app") == "node" and "object:" not in got[2].get("k8senrichmissing", "")
    assert reader.reads == ["/api/v1/nodes/n1"]  # neither the Pod nor the Node for the others
