"""The runtime's pipeline through its ports only: an in-memory API server, publisher and
checkpoint store. What must hold whatever is behind the ports: the checkpoint moves only past
what was acked, a stop drains (bounded) and then saves, a failed task ends the run."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import msgspec

from bridge import errors
from bridge.core.checkpoints import checkpoint_key
from bridge.core.resources import NAMESPACES
from bridge.errors import EXIT_FAILED, EXIT_OK
from bridge.metrics import Metrics
from bridge.runtime import ports
from bridge.runtime.health import Health
from bridge.runtime.pipeline import Pipeline
from bridge.settings import Settings
from k8s_event_common.clock import Clock
from tests import support
from tests.support import OPEN, Ever, FakeSource, MemoryPublisher, MemoryStore, NotMet, eventually
from tests.virtualtime import LOOP, virtual_time

KEY = checkpoint_key("c", None)


def event(name: str, rv: int) -> dict:
    return support.event(name, rv, namespace="ns")


def MemorySource(
    listed: list[dict], list_rv: int, watched: list[dict], expired_below: int = 0
) -> FakeSource:
    """The watch port's fake (tests/support.py) as an API server: every list of Events answers
    one page, every watch sends its lines and stays open (a quiet watch); a watch from a
    resourceVersion below ``expired_below`` gets 410. No Namespace (for a pipeline with
    enrich: its namespace watch lists none and stays open)."""
    page = {
        "metadata": {"resourceVersion": str(list_rv)},
        "items": [msgspec.json.encode(e) for e in listed],
    }
    lines = [msgspec.json.encode({"type": "ADDED", "object": e}) for e in watched]

    def watch(rv: str):
        if int(rv) < expired_below:
            return errors.ResourceExpired("410 Expired: too old resource version")
        return [*lines, OPEN]

    source = FakeSource(lists=[Ever(page)], watches=[Ever(watch)])
    no_namespaces = {"metadata": {"resourceVersion": str(list_rv)}, "items": []}
    source.serve(NAMESPACES, lists=[Ever(no_namespaces)], watches=[Ever([OPEN])])
    return source


def pipeline(source, publisher, store, drain_timeout=2.0) -> Pipeline:
    settings = Settings(
        cluster={"name": "c"},
        kubernetes={"backoff": {"initial": "10ms", "max": "50ms"}},
        checkpoint={"interval": 0.05},
        shutdown={"drain_timeout": drain_timeout},
    )
    # the fakes satisfy the runtime's ports as the real clients do
    src: ports.ListerWatcher = source
    pub: ports.Publisher = publisher
    st: ports.CheckpointStore = store
    return Pipeline(
        settings,
        cluster="c",
        source=src,
        publisher=pub,
        store=st,
        metrics=Metrics(),
        health=Health(60.0, clock=LOOP),
        clock=LOOP,
    )


async def run_until(p: Pipeline, done, stop: asyncio.Event) -> int:
    await p.open()
    task = asyncio.create_task(p.run(stop))
    with suppress(NotMet):  # the test's own assertions judge where it got to
        await eventually(lambda: done() or task.done(), 5, 0.01)
    stop.set()
    return await asyncio.wait_for(task, 10)


@virtual_time
async def test_a_stop_drains_then_saves_the_last_acked_resource_version():
    source = MemorySource([event("a", 5), event("b", 8)], 10, [event("c", 11), event("d", 12)])
    publisher, store = MemoryPublisher(), MemoryStore()
    p = pipeline(source, publisher, store)
    code = await run_until(p, lambda: len(publisher.sent) >= 5, asyncio.Event())
    assert code == EXIT_OK
    assert len(source.list_calls) == 1 and source.watch_calls[0]["rv"] == "10"
    assert publisher.sent[0].startswith("started ")
    assert [s for s in publisher.sent if "uid-" in s] == [
        "BackOff uid-a/5",
        "BackOff uid-b/8",
        "BackOff uid-c/11",
        "BackOff uid-d/12",
    ]
    assert publisher.sent[-1].startswith("stopped ")
    assert store.saved == {KEY: 12}
    assert p.scopes[0].saved == 12


@virtual_time
async def test_an_unacked_event_holds_the_checkpoint_through_the_drain_timeout():
    source = MemorySource([event("a", 5)], 10, [event("c", 11), event("d", 12)])
    publisher, store = MemoryPublisher(hold=frozenset({"uid-c/11"})), MemoryStore()
    p = pipeline(source, publisher, store, drain_timeout=0.2)
    code = await run_until(p, lambda: "BackOff uid-d/12" in publisher.sent, asyncio.Event())
    assert code == EXIT_OK
    # d was acked, c was not: the checkpoint stays at the list's resourceVersion, before c
    assert store.saved == {KEY: 10}
    assert all(rv <= 10 for _, rv in store.writes)


@virtual_time
async def test_a_scope_with_a_checkpoint_watches_from_it_without_a_list():
    source = MemorySource([event("a", 5)], 10, [event("e", 21)])
    publisher, store = MemoryPublisher(), MemoryStore({KEY: 20})
    p = pipeline(source, publisher, store)
    code = await run_until(p, lambda: "BackOff uid-e/21" in publisher.sent, asyncio.Event())
    assert code == EXIT_OK
    assert source.list_calls == [] and [c["rv"] for c in source.watch_calls] == ["20"]
    assert store.saved == {KEY: 21}


@virtual_time
async def test_a_failed_task_ends_the_run_with_exit_code_1_and_saves_what_was_acked():
    source = MemorySource([event("a", 5)], 10, [])
    publisher, store = MemoryPublisher(fail=RuntimeError("broken")), MemoryStore({KEY: 3})
    p = pipeline(source, publisher, store, drain_timeout=0.2)
    code = await run_until(p, lambda: False, asyncio.Event())
    assert code == EXIT_FAILED
    assert store.saved == {KEY: 3}  # nothing was acked: the checkpoint did not move


@virtual_time
async def test_a_gap_holds_the_checkpoint_until_stored_and_is_found_again_after_a_restart():
    """History compacted while away: the watch from the checkpoint gets 410, the relist
    publishes what is newer and a gap. While the gap is not stored, the checkpoint stays
    before the relist (the Events after it acked or not): a restart meets the 410 again and
    reports the gap again, so it can not be lost."""
    source = MemorySource([event("c", 25)], 30, [], expired_below=30)
    first = MemoryPublisher(hold=frozenset({"c/gap/*/10-30"}))
    store = MemoryStore({KEY: 10})
    p = pipeline(source, first, store, drain_timeout=0.2)
    code = await run_until(p, lambda: "gap c/gap/*/10-30" in first.sent, asyncio.Event())
    assert code == EXIT_OK
    assert source.watch_calls[0]["rv"] == "10" and len(source.list_calls) == 1
    assert "BackOff uid-c/25" in first.sent  # stored
    assert store.saved == {KEY: 10}  # not past the gap that was not
    again = MemoryPublisher()
    p = pipeline(source, again, store)
    code = await run_until(p, lambda: store.saved == {KEY: 30}, asyncio.Event())
    assert code == EXIT_OK
    assert "gap c/gap/*/10-30" in again.sent and store.saved == {KEY: 30}
    assert source.watch_calls[-1]["rv"] == "30"


def test_readiness_is_per_scope():
    clock = [100.0]
    health = Health(60.0, clock=Clock(monotonic=lambda: clock[0]))
    assert health.problems() == ["no watch has started yet"]
    health.nats_up(True)
    shop, payments = health.scope("shop"), health.scope("payments")
    shop.watch_ok()
    payments.watch_failed("Forbidden: 403 Forbidden: events is forbidden")
    assert health.problems() == [
        "scope payments: the first list or watch has not finished: "
        "Forbidden: 403 Forbidden: events is forbidden"
    ]
    payments.watch_ok()
    assert health.ready
    shop.watch_failed("KubeUnavailable: refused")
    clock[0] += 59
    assert health.ready  # a blip shorter than unready_after
    clock[0] += 2
    assert health.problems() == [
        "scope shop: the watch has failed for 61s: KubeUnavailable: refused"
    ]


@virtual_time
async def test_checkpoint_lag_stays_0_on_a_quiet_scope_and_grows_while_saves_fail():
    from bridge.core.progress import Progress
    from bridge.runtime.checkpointing import Checkpointer, Scope

    class Watching:
        rv: int | None = 10

    class FailingStore(MemoryStore):
        failing = False

        async def save(self, key, resource_version):
            if self.failing:
                raise errors.JetStreamUnavailable("no quorum")
            await super().save(key, resource_version)

    now = [1000.0]
    progress, watcher, store, metrics = Progress(10), Watching(), FailingStore(), Metrics()
    scope = Scope(None, KEY, progress, watcher)  # type: ignore[arg-type]
    cp = Checkpointer(store, [scope], metrics, 1.0, clock=Clock(monotonic=lambda: now[0]))

    def lag():
        cp.observe()
        return metrics.checkpoint_lag.labels("*")._value.get()

    assert lag() == 0.0
    now[0] += 3600  # an hour with nothing new: still nothing unsaved
    assert lag() == 0.0 and metrics.checkpoint_age._value.get() == 3600
    watcher.rv = 11  # read, then acked, then saved within the interval
    e = progress.pending(11)
    assert lag() == 0.0  # just now
    now[0] += 0.5
    e.settle()
    await cp.save_all()
    assert lag() == 0.0 and store.saved == {KEY: 11}
    store.failing = True  # read and acked, but the checkpoint can not be written
    watcher.rv = 12
    progress.pending(12).settle()
    lag()
    for _ in range(5):
        now[0] += 1
        await cp.save_all()
    assert lag() == 5.0
    store.failing = False
    await cp.save_all()
    assert lag() == 0.0 and store.saved == {KEY: 12}


@virtual_time
async def test_a_lost_lease_stops_everything_at_once_and_writes_no_checkpoint():
    """The leader election's hold ends (renew deadline passed): the pipeline stops without a
    drain, publishes nothing more (no `stopped`), and does not write the checkpoint again."""
    source = MemorySource([event("a", 5)], 10, [event("c", 11)])
    publisher, store = MemoryPublisher(hold=frozenset({"uid-c/11"})), MemoryStore({KEY: 3})
    p = pipeline(source, publisher, store)
    p.checkpointer.interval = 3600  # only the final save would write
    fence: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    await p.open()
    task = asyncio.create_task(p.run(asyncio.Event(), fence=fence))
    await eventually(lambda: "BackOff uid-c/11" in publisher.sent, 2, 0.01)
    writes = list(store.writes)
    fence.set_exception(RuntimeError("no renewal of the Lease for 10s"))
    assert await asyncio.wait_for(task, 5) == EXIT_FAILED
    assert not any(s.startswith("stopped ") for s in publisher.sent)
    assert store.writes == writes  # the checkpoint was not written again


def test_a_standby_is_ready_with_no_scope_while_nats_is():
    clock = [100.0]
    health = Health(60.0, clock=Clock(monotonic=lambda: clock[0]))
    health.standby = True
    health.nats_up(True)
    assert health.ready
    health.nats_up(False)
    clock[0] += 61
    assert health.problems() == ["NATS has been unreachable for 61s"]


@virtual_time
async def test_a_lease_lost_while_draining_writes_no_final_checkpoint():
    source = MemorySource([event("a", 5)], 10, [event("c", 11)])
    publisher, store = MemoryPublisher(hold=frozenset({"uid-c/11"})), MemoryStore({KEY: 3})
    p = pipeline(source, publisher, store, drain_timeout=0.5)
    p.checkpointer.interval = 3600
    fence: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    await p.open()
    task = asyncio.create_task(p.run(stop, fence=fence))
    await eventually(lambda: "BackOff uid-c/11" in publisher.sent, 2, 0.01)
    writes = list(store.writes)
    stop.set()  # SIGTERM: the drain waits for uid-c/11, which never comes
    await asyncio.sleep(0.1)
    fence.set_exception(RuntimeError("no renewal of the Lease for 10s"))
    assert await asyncio.wait_for(task, 5) == EXIT_FAILED
    assert store.writes == writes
