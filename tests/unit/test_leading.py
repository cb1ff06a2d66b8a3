"""Leader election on a Lease (bridge.runtime.leading), on an injected clock against an
in-memory Lease store that behaves like the API server (resourceVersion, 404, 409)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from bridge import errors
from bridge.core.leases import LeaseRecord, micro_time
from bridge.runtime.leading import Elector, LeadershipLost
from bridge.settings import LeaderElectionSettings
from k8s_event_common.clock import Clock, ManualClock
from tests.virtualtime import LOOP, virtual_time


class Leases:
    """One namespace's Leases, with optimistic concurrency as the API server has it."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.rv = 0
        self.down = False
        self.writes: list[tuple[str, str]] = []  # (name, holder) per successful write

    def _check(self) -> None:
        if self.down:
            raise errors.KubeUnavailable("refused")

    async def get_lease(self, namespace, name):
        self._check()
        obj = self.objects.get(name)
        return copy.deepcopy(obj) if obj is not None else None

    async def create_lease(self, namespace, lease):
        self._check()
        name = lease["metadata"]["name"]
        if name in self.objects:
            raise errors.Conflict("409 AlreadyExists")
        return self._store(lease)

    async def replace_lease(self, namespace, lease):
        self._check()
        name = lease["metadata"]["name"]
        if self.objects[name]["metadata"]["resourceVersion"] != lease["metadata"].get(
            "resourceVersion"
        ):
            raise errors.Conflict("409 the object has been modified")
        return self._store(lease)

    def _store(self, lease):
        self.rv += 1
        obj = copy.deepcopy(lease)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[obj["metadata"]["name"]] = obj
        self.writes.append((obj["metadata"]["name"], obj["spec"]["holderIdentity"]))
        return copy.deepcopy(obj)

    def holder(self, name="bridge"):
        return self.objects[name]["spec"]["holderIdentity"]


SETTINGS = LeaderElectionSettings(enabled=True, lease_name="bridge")


def shared_clock() -> ManualClock:
    return ManualClock(1000.0, wall_at_zero=1_700_000_000.0)


def elector(store, clock, identity, rand=0.0):
    """An elector on the shared ``clock``, with a jitter of its own."""
    own = Clock(monotonic=clock.monotonic, wall=clock.wall, sleep=clock.sleep, random=lambda: rand)
    return Elector(store, SETTINGS, identity=identity, namespace="ns", clock=own)


async def test_the_first_takes_a_missing_lease():
    store, clock = Leases(), shared_clock()
    a = elector(store, clock, "a")
    await a.acquire()
    assert a.leading and store.holder() == "a" and a.previous_holder == ""
    spec = store.objects["bridge"]["spec"]
    assert spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 0
    assert spec["renewTime"].endswith("Z") and len(spec["renewTime"].split(".")[1]) == 7


async def test_a_standby_takes_over_only_after_the_lease_went_unrenewed_for_its_duration():
    store, clock = Leases(), shared_clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.acquire()
    start = clock.now
    await b.acquire()  # a never renews: b waits out the duration, as it saw it
    assert b.leading and store.holder() == "b" and b.previous_holder == "a"
    assert 15.0 <= clock.now - start <= 15.0 + 2 * 2.2  # one duration, plus its retry period
    assert store.objects["bridge"]["spec"]["leaseTransitions"] == 1


async def test_a_renewing_leader_keeps_it():
    store, clock = Leases(), shared_clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.acquire()
    hold = asyncio.create_task(a.hold())
    for _ in range(40):  # b tries for about 100 s (fake) while a renews
        assert not await b._try(timeout=1.0)
        await clock.sleep(2.5)
    assert store.holder() == "a" and a.leading and not b.leading
    hold.cancel()
    await asyncio.gather(hold, return_exceptions=True)


async def test_a_leader_that_can_not_renew_gives_up_before_anyone_may_take_over():
    """No renewal for renew_deadline (10 s): LeadershipLost, while the Lease still has 5 s
    to run for anyone else (15 s): the deposed leader stops first."""
    store, clock = Leases(), shared_clock()
    a = elector(store, clock, "a")
    await a.acquire()
    renewed = a.renewed_at
    store.down = True
    with pytest.raises(LeadershipLost):
        await a.hold()
    assert not a.leading
    assert renewed + 10.0 <= clock.now < renewed + 15.0


async def test_release_lets_the_standby_take_over_at_its_next_attempt():
    store, clock = Leases(), shared_clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.acquire()
    assert not await b._try(timeout=1.0)  # b has seen a's record
    await a.release()
    assert store.holder() == "" and store.objects["bridge"]["spec"]["leaseDurationSeconds"] == 1
    start = clock.now
    await b.acquire()
    assert clock.now - start < 5.0  # not a lease duration
    assert b.previous_holder == "" and store.holder() == "b"


async def test_two_racing_for_a_missing_lease_one_wins():
    store, clock = Leases(), shared_clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    results = await asyncio.gather(a._try(timeout=1.0), b._try(timeout=1.0))
    assert sorted(results) == [False, True]
    assert store.holder() in ("a", "b") and len(store.writes) == 1


@virtual_time
async def test_a_hung_api_server_does_not_keep_a_leader_past_its_renew_deadline():
    """Requests that never answer are cut off at the deadline (the clock's timeout, on the
    loop's virtual time)."""
    store = Leases()
    fast = LeaderElectionSettings(
        enabled=True,
        lease_name="bridge",
        lease_duration=1.5,
        renew_deadline=1.0,
        retry_period=0.2,
    )
    a = Elector(store, fast, identity="a", namespace="ns", clock=LOOP)
    await a.acquire()

    async def hang(namespace, name):
        await asyncio.Event().wait()

    store.get_lease = hang
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(a.hold(), timeout=10)
    assert loop.time() - t0 < 1.5  # before the Lease could pass to anyone else


def test_micro_time_always_has_six_digits():
    assert micro_time(1_700_000_000.0) == "2023-11-14T22:13:20.000000Z"
    assert micro_time(1_700_000_000.25) == "2023-11-14T22:13:20.250000Z"


def test_a_malformed_lease_is_read_as_nobody_holds_it():
    r = LeaseRecord.of({"spec": {"holderIdentity": 5, "leaseDurationSeconds": "x"}})
    assert r.holder == "" and r.duration == 0 and r.transitions == 0
