"""Faults of the enrichment found by review, each shown failing before its fix: a worker that
ends stops the bridge as a failure, a failed shared read never cancels the stage, the drain
waits for the Event in hand, no tight loop on the namespace watch, a failed namespace list
holds no Event, read tasks are bounded, ``started`` follows the first lists through the stage,
a re-created object is read again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from bridge import errors
from bridge.metrics import Metrics
from bridge.runtime.health import Health
from bridge.runtime.pipeline import Pipeline
from bridge.settings import Settings
from tests.support import MemoryPublisher, MemoryStore, Reader, eventually
from tests.unit.test_enrichment import Rig, cluster, event, event_obj, obj, settings
from tests.unit.test_pipeline import KEY, MemorySource
from tests.unit.test_pipeline import event as pipeline_event
from tests.virtualtime import LOOP, virtual_time

# Review: an Event the enricher has taken out of its stage (waiting for its lookups) is
# counted nowhere, so a graceful stop's drain ends before it is published.


def pipeline(s: Settings, source, publisher, store, reader) -> Pipeline:
    """A pipeline of in-memory ports (tests/unit/test_pipeline.py) with ``reader`` for the
    enrichment."""
    return Pipeline(
        s,
        cluster="c",
        source=source,
        publisher=publisher,
        store=store,
        metrics=Metrics(),
        health=Health(60.0, clock=LOOP),
        reader=reader,
        clock=LOOP,
    )


def enriched_pipeline(source, publisher, store, reader, drain_timeout=5.0) -> Pipeline:
    settings = Settings(
        cluster={"name": "c"},
        kubernetes={"backoff": {"initial": "10ms", "max": "50ms"}},
        checkpoint={"interval": 0.05},
        shutdown={"drain_timeout": drain_timeout},
        enrich={
            "namespace": {"labels": {"team": "team"}},
            "object": {"labels": {"app": "app"}},
            "lookup_timeout": 1.0,
        },
    )
    return pipeline(settings, source, publisher, store, reader)


@virtual_time
async def test_drain_waits_for_the_event_the_enricher_holds():
    reader = Reader()
    reader.hang.clear()  # the object read hangs: the Event waits its lookup_timeout (1 s)
    held = pipeline_event("c", 11)
    held["involvedObject"]["uid"] = "pod-c"  # an object that can be read (no uid: none is)
    source = MemorySource([], 10, [held])
    publisher, store = MemoryPublisher(), MemoryStore()
    p = enriched_pipeline(source, publisher, store, reader)
    await p.open()
    stop = asyncio.Event()
    task = asyncio.create_task(p.run(stop))
    # the Event is out of the stage, in Enricher.run's _enrichment, waiting for the lookup
    await eventually(lambda: reader.reads and len(p.enricher.stage) == 0, 5, 0.01)
    await asyncio.sleep(0.1)
    t0 = asyncio.get_running_loop().time()
    stop.set()
    assert not task.done()
    code = await asyncio.wait_for(task, 10)
    took = asyncio.get_running_loop().time() - t0
    print("sent:", publisher.sent, "saved:", store.saved, "took:", round(took, 2))
    assert code == 0
    # a graceful stop with drain_timeout 5 s and lookup_timeout 1 s should publish it
    assert "BackOff uid-c/11" in publisher.sent, publisher.sent
    assert store.saved == {KEY: 11}


# Review: the enricher's read tasks (and _chains, their futures, their semaphore waiters) are
# bounded by nothing: Events leave the stage at their deadline while their reads still queue
# for a slot, so with reads slower than Events arrive the backlog grows without bound.


class SlowReader(Reader):
    """Every read answers (404) after 0.15 s: slow, never past the lookup timeout."""

    async def get_object(self, path):
        self.reads.append(path)
        await asyncio.sleep(0.15)
        from bridge import errors

        raise errors.NotFound("nope")


@virtual_time
async def test_read_tasks_are_bounded():
    reader = SlowReader()
    cluster(reader)
    s = settings(lookup_timeout=0.2, max_inflight=1, max_pending=16)
    most_tasks = most_chains = 0
    async with Rig(s, reader) as rig:
        n = 400

        async def feed():
            for i in range(n):
                # distinct objects, as anyone who may create Events in a namespace can name
                await rig.intake.items([("ADDED", event(f"e{i}", f"pod-{i}", rv=i + 1), i + 1)])

        async def drain():
            for _ in range(n):
                o = await rig.queue.get()
                o.entry.settle()

        async def watch():
            nonlocal most_tasks, most_chains
            while True:
                most_tasks = max(most_tasks, len(rig.enricher._tasks))
                most_chains = max(most_chains, len(rig.enricher._chains))
                await asyncio.sleep(0.01)

        w = asyncio.create_task(watch())
        await asyncio.wait_for(asyncio.gather(feed(), drain()), 60)
        left = len(rig.enricher._tasks)
        w.cancel()
    print(
        "most tasks",
        most_tasks,
        "most chains",
        most_chains,
        "left after all out",
        left,
        "reads done",
        len(reader.reads),
    )
    # bounded by configuration: at most max_pending Events wait, max_inflight reads run
    assert most_tasks <= 16 + 1, most_tasks


# Review: the namespace watch that ends at once (no error, no line) is opened again at once,
# without a back-off: a tight loop against the API server (invariant 5).


class ClosingReader(Reader):
    def __init__(self):
        super().__init__()
        self.watches = 0

    def watch_namespaces(self, resource_version):
        self.watches += 1
        return []  # no line: the watch ends at once


class ExpiringReader(Reader):
    """Every namespace watch answers 410 at once (e.g. a resourceVersion the server will not
    serve): list, watch, 410, list... with no pause."""

    def __init__(self):
        super().__init__()
        self.watches = 0

    def watch_namespaces(self, resource_version):
        self.watches += 1
        return [b'{"type":"ERROR","object":{"kind":"Status","code":410}}']


@virtual_time
async def test_a_namespace_watch_that_closes_at_once_is_not_reopened_at_once():
    reader = ClosingReader()
    cluster(reader)
    async with Rig(settings(), reader):
        await asyncio.sleep(0.5)
    print("namespace watches opened in 0.5 s:", reader.watches)
    assert reader.watches < 10


@virtual_time
async def test_a_namespace_watch_410_loop_is_not_a_tight_loop():
    reader = ExpiringReader()
    cluster(reader)
    async with Rig(settings(), reader):
        await asyncio.sleep(0.5)
    print("lists", reader.lists, "watches", reader.watches, "in 0.5 s")
    assert reader.lists < 10


# Review: an unexpected exception in one read (here: reload_credentials after a 401 raising
# ConfigError, as KubeClient.connect does on an unreadable token) cancels the shared _reads
# future; a chain that joined that read is cancelled, and Enricher.run, awaiting that chain
# through shield(), receives CancelledError and ends as 'cancelled' - which Pipeline.run does
# not count as a failure (exit 0, no task_failed), with Events stuck in the stage.


class Reader401(Reader):
    async def get_object(self, path):
        self.reads.append(path)
        if path.endswith("/pods/p1"):
            await asyncio.sleep(0.05)  # p1 slow: its chain joins the ReplicaSet read later
        if path.endswith("/replicasets/rs"):
            await asyncio.sleep(0.1)
            raise errors.Unauthorized("401: token rotated")
        return self.objects[path]

    async def reload_credentials(self):
        raise errors.ConfigError("kubernetes credentials: token file empty")


@virtual_time
async def test_a_failed_read_shared_by_two_chains_does_not_stop_the_stage():
    reader = Reader401()
    reader.namespaces = []
    reader.add("ReplicaSet", obj("ReplicaSet", "rs", "r1"))
    reader.add("Pod", obj("Pod", "p1", "u1", owner=("ReplicaSet", "rs", "r1")))
    reader.add("Pod", obj("Pod", "p2", "u2", owner=("ReplicaSet", "rs", "r1")))
    s = settings(lookup_timeout=2.0)
    async with Rig(s, reader) as rig:
        run_task = rig.tasks[0]
        await rig.intake.items(
            [
                ("ADDED", event("a", "p1", uid="u1", rv=1), 1),  # head of the stage
                ("ADDED", event("b", "p2", uid="u2", rv=2), 2),  # owns the ReplicaSet read
            ]
        )
        await asyncio.sleep(0.5)
        print(
            "run task done:",
            run_task.done(),
            "cancelled:",
            run_task.done() and run_task.cancelled(),
        )
        print("queue:", len(rig.queue), "stage:", len(rig.enricher.stage))
        assert not run_task.done(), "the enricher's stage task ended"
        got = await rig.out(2)
        print([ce.get("k8senrichmissing") for _, ce in got])


@virtual_time
async def test_in_the_pipeline_the_bridge_runs_on_and_publishes_both():
    from bridge.settings import Settings
    from tests.unit.test_pipeline import MemorySource

    reader = Reader401()
    reader.namespaces = []
    reader.add("ReplicaSet", obj("ReplicaSet", "rs", "r1"))
    reader.add("Pod", obj("Pod", "p1", "u1", owner=("ReplicaSet", "rs", "r1")))
    reader.add("Pod", obj("Pod", "p2", "u2", owner=("ReplicaSet", "rs", "r1")))

    def ev(name, pod, uid, rv):
        return event_obj(name, pod, uid=uid, rv=rv)

    source = MemorySource([], 10, [ev("a", "p1", "u1", 11), ev("b", "p2", "u2", 12)])
    publisher, store = MemoryPublisher(), MemoryStore()
    s = Settings(
        cluster={"name": "c"},
        checkpoint={"interval": 0.05},
        shutdown={"drain_timeout": 1.0},
        enrich={
            "namespace": {"labels": {"team": "team"}},
            "object": {"labels": {"app": "app"}, "owner_name": "ownername"},
            "lookup_timeout": 2.0,
        },
    )
    p = pipeline(s, source, publisher, store, reader)
    await p.open()
    stop = asyncio.Event()
    task = asyncio.create_task(p.run(stop))
    # both Events go out (the shared read's failure marks them), and the bridge runs on
    await eventually(lambda: len([m for m in publisher.sent if "BackOff" in m]) == 2, 20, 0.02)
    assert not task.done(), "the pipeline stopped by itself"
    stop.set()
    assert await asyncio.wait_for(task, 20) == 0


# Review: a Pod deleted and made again under the same name (a StatefulSet's web-0) has a new
# uid; while the old one is fresh in the cache, the new Pod's Events are marked
# object:notfound for up to cache_ttl: _from_cache misses on the uid, but _read answers from
# the same fresh cache entry and never reads the new object.


@virtual_time
async def test_a_recreated_object_is_read_again():
    reader = Reader()
    cluster(reader)
    reader.add("StatefulSet", obj("StatefulSet", "db", "s1", selector={"app": "db"}))
    reader.add(
        "Pod", obj("Pod", "db-0", "old", labels={"app": "db"}, owner=("StatefulSet", "db", "s1"))
    )
    async with Rig(settings(), reader) as rig:
        await rig.intake.items([("ADDED", event("a", "db-0", uid="old", rv=1), 1)])
        [(_, ce)] = await rig.out(1)
        assert ce["k8senriched"] == "complete" and ce["ownername"] == "db"
        # the StatefulSet controller deletes db-0 and makes it again: a new uid
        reader.add(
            "Pod",
            obj("Pod", "db-0", "new", labels={"app": "db"}, owner=("StatefulSet", "db", "s1")),
        )
        await rig.intake.items([("ADDED", event("b", "db-0", uid="new", rv=2), 2)])
        [(_, ce)] = await rig.out(1)
    print("reads:", reader.reads)
    print(
        "new pod's Event:", ce.get("k8senriched"), ce.get("k8senrichmissing"), ce.get("ownername")
    )
    assert ce["k8senriched"] == "complete", ce.get("k8senrichmissing")


# Review: with enrich, `started` (after a first start by age) is queued straight onto the
# publisher's queue when the first lists end, while the listed Events still wait in the
# enricher's stage: it is published before them, not after as README/design say.


@virtual_time
async def test_started_follows_the_first_list_with_enrich():
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    listed = []
    for i, name in enumerate(["a", "b"]):
        e = pipeline_event(name, 5 + i)
        e["lastTimestamp"] = now
        listed.append(e)
    reader = Reader()
    reader.hang.clear()
    source = MemorySource(listed, 10, [])
    publisher, store = MemoryPublisher(), MemoryStore()
    s = Settings(
        cluster={"name": "c"},
        kubernetes={"initial": "1h"},
        checkpoint={"interval": 0.05},
        enrich={
            "namespace": {"labels": {"team": "team"}},
            "object": {"labels": {"app": "app"}},
            "lookup_timeout": 0.5,
        },
    )
    p = pipeline(s, source, publisher, store, reader)
    await p.open()
    stop = asyncio.Event()
    task = asyncio.create_task(p.run(stop))
    await eventually(lambda: len(publisher.sent) >= 1, 5, 0.01)
    print("done early?", task.done(), task.done() and task.result())
    await eventually(lambda: len(publisher.sent) >= 3, 5, 0.01)
    print("done?", task.done(), list(publisher.sent), stop.is_set())
    stop.set()
    print("code", await asyncio.wait_for(task, 10))
    print(publisher.sent)
    # the scope's first answer goes straight to the queue; the listed Events before started
    events_and_started = [m for m in publisher.sent if not m.startswith("apiserver_reachable")]
    assert events_and_started[0].startswith("BackOff"), publisher.sent


# Review: with enrich.object only (no namespace label or annotation), the namespace task
# (then Enricher.run_namespaces, now the namespace Watcher) returned at once; Pipeline.run
# counts that worker's end as
# 'a task finished' and stops the whole bridge with exit 0, seconds after it started, with
# nobody asking.


@virtual_time
async def test_object_only_enrichment_keeps_running():
    reader = Reader()
    source = MemorySource([], 10, [pipeline_event("c", 11)])
    publisher, store = MemoryPublisher(), MemoryStore()
    s = Settings(
        cluster={"name": "c"},
        enrich={"object": {"owner_kind": "ownerkind", "owner_name": "ownername"}},
    )
    p = pipeline(s, source, publisher, store, reader)
    await p.open()
    stop = asyncio.Event()  # never set
    task = asyncio.create_task(p.run(stop))
    await asyncio.sleep(1.0)
    print("ran by itself to the end:", task.done(), task.done() and task.result(), publisher.sent)
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, 10)


# Review: while the namespace list fails (403: RBAC without list on namespaces, e.g. enrich
# set by an env var the chart's RBAC does not see), every Event waits its whole lookup_timeout:
# throughput is capped at max_pending / lookup_timeout.


class NoNamespaces(Reader):
    def list_namespaces(self):
        raise errors.Forbidden("403: namespaces is forbidden")


async def test_a_forbidden_namespace_list_does_not_hold_every_event():
    reader = NoNamespaces()
    s = settings(object={"labels": {}}, lookup_timeout=0.2, max_pending=5)
    async with Rig(s, reader) as rig:
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def feed():
            for i in range(1, 51):
                await rig.intake.items([("ADDED", event(f"e{i}", "p", rv=i), i)])

        await asyncio.gather(feed(), rig.out(50))
        took = loop.time() - t0
    print("50 Events took", round(took, 2), "s")
    assert took < 1.0


# Review: an Event whose involvedObject.uid is not the cached object's is a cache miss every
# time (the mismatch is never remembered): one GET per Event, whatever cache_ttl says.


@virtual_time
async def test_a_stale_uid_is_read_once_per_ttl_not_once_per_event():
    reader = Reader()
    cluster(reader)
    async with Rig(settings(), reader) as rig:
        for i in range(1, 21):
            # e.g. the Events of a StatefulSet Pod before it was re-created, or forged ones
            await rig.intake.items([("ADDED", event(f"e{i}", "web-1-a", uid="old", rv=i), i)])
            [(_, ce)] = await rig.out(1)
        n = reader.reads.count("/api/v1/namespaces/shop/pods/web-1-a")
    print("reads of the pod for 20 Events:", n, ce.get("k8senrichmissing"))
    assert n <= 2


@virtual_time
async def test_a_worker_that_ends_by_itself_stops_the_bridge_as_a_failure():
    """Every task of the pipeline runs until the stop: one that returns (as the namespace
    task did with nothing to watch) is a failure, never a clean stop with exit 0."""
    from bridge.errors import EXIT_FAILED

    class Returning(MemoryPublisher):
        async def reap(self) -> None:
            return None

    p = pipeline(
        Settings(cluster={"name": "c"}), MemorySource([], 10, []), Returning(), MemoryStore(), None
    )
    await p.open()
    assert await asyncio.wait_for(p.run(asyncio.Event()), 10) == EXIT_FAILED
