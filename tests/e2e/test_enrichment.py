"""Enrichment (``enrich``) on a living cluster (cluster.py), on each Kubernetes version of the
tier: the bridge runs as deploy/'s ServiceAccount with the RBAC of deploy/components/enrich
(list and watch namespaces, get on the kinds it reads) and adds to each CloudEvent the team of
the Event's namespace (a label), the app of its involved object (a label) and the object's top
controller (``ownerkind``, ``ownername``, through the controller ownerReferences); the team goes
into the subject (``nats.subject_template``), so that a team's subscriber takes its Events with
one subject filter (``k8s_event_common.subjects.subject_filter``).

The truth is the independent raw watch of truth.py: a subscriber, or the stream, must hold
every version it saw in the namespaces concerned, once, and nothing else. What a lookup could
not find is said by ``k8senriched: partial`` and ``k8senrichmissing`` (``part:why``); no test
asserts how long an Event waited for its lookups (a wall clock under load proves nothing).

- Two teams, each a namespace with a crash-looping Deployment: each subscriber gets exactly
  its team's Events, each complete, with its team, app and top controller.
- The API server unreachable mid-stream: first only the bridge's requests are held (its open
  watch goes on streaming, its lookups hang), then the link breaks, then it comes back: every
  version once; what was read while the lookups failed is marked object/owner timeout or
  unreachable, the rest is complete.
- Events about many distinct Pods that do not exist (10k on the newest version, 3k on the
  oldest; more with $K8S_EVENT_BRIDGE_E2E_DISTINCT_OBJECTS: 50k passed on the newest), on a
  control plane of the test's own: all published, each ``object:notfound``; the lookup cache stays
  within ``enrich.cache_entries`` and ``cache_bytes`` (``/status``
  internals) and the RSS within the bound of bench/budget.py.
- A first start by age (``kubernetes.initial: 30m``) on a namespace with history: only the
  recent Events are published, and ``started`` says how many were skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import nats
import pytest
import yaml

from bench.budget import Budget
from bridge.access import rules
from bridge.settings import load
from k8s_event_common.subjects import subject_filter, token
from k8s_event_sim.programs import cpu_seconds, memory_kb
from k8s_event_sim.tcpproxy import LatencyProxy
from k8s_event_sim.workload import Style
from tests.cloudevent_expected import CLUSTER, expected_attributes
from tests.e2e.truth import Truth, cloudevent, stream_events
from tests.integration.harness import (
    BridgeProcess,
    Bridges,
    bridge_config,
    deep_merge,
    status_events,
    stream_messages,
)
from tests.standins.cluster import CRASHLOOP_LABEL, LivingCluster, deployment
from tests.standins.controlplane import REPO, ControlPlane
from tests.standins.controlplane import kubernetes_version as version_named
from tests.support import NotMet, eventually, make_event

pytestmark = pytest.mark.e2e

ENRICH_RBAC = REPO / "deploy" / "components" / "enrich" / "rbac.yaml"
PREFIX = "k8s.events"
TEMPLATE = "{cluster}.{team}.{namespace}.{kind}.{reason}"
ENRICH: dict[str, Any] = {
    "namespace": {"labels": {"team": "team"}},
    "object": {"labels": {"app": "app"}, "owner_kind": "ownerkind", "owner_name": "ownername"},
}
# the kinds of a Deployment's Events and its Pods': their top controller is the Deployment
OWNED = ("Pod", "ReplicaSet", "Deployment")
CACHE_ENTRIES = 2000  # below the number of distinct objects, so that the bound is reached

_ns = itertools.count(1)

Received = tuple[dict[str, Any], dict[str, Any]]  # (attributes, data) of a CloudEvent


# ----------------------------------------------------------------------------- fixtures


def grant_enrichment(cp: ControlPlane) -> Path:
    """deploy/ and the RBAC of deploy/components/enrich applied, as an operator would; a token
    for the bridge's ServiceAccount."""
    kubeconfig = cp.deployed_bridge_kubeconfig()
    cp.kubectl("apply", "-f", str(ENRICH_RBAC))
    return kubeconfig


@pytest.fixture(scope="session")
def enrich_kubeconfig(living_cluster: LivingCluster) -> Path:
    return grant_enrichment(living_cluster)


@pytest.fixture
def team_namespace(living_cluster: LivingCluster) -> Iterator[Callable[[str], str]]:
    """``team_namespace(team)``: a new namespace labelled team=<team>, deleted at the end."""
    made: list[str] = []

    def make(team: str) -> str:
        made.append(living_cluster.create_namespace(f"enrich-{next(_ns)}", {"team": team}))
        return made[-1]

    yield make
    for ns in made:
        living_cluster.kubectl("delete", "namespace", ns, "--wait=false")


@pytest.fixture
def start_bridge(tmp_path: Path, nats_server: Any) -> Iterator[Callable[..., BridgeProcess]]:
    """``start_bridge(kubeconfig, **sections)``: a bridge with the enrichment and the team in
    the subject (``sections`` override per key), killed at the end."""
    bridges = Bridges(tmp_path)

    def start(kubeconfig: Path, **sections: Any) -> BridgeProcess:
        base = {
            "cluster": {"name": CLUSTER},
            "nats": {"subject_template": TEMPLATE},
            "enrich": ENRICH,
            # the living cluster's Event watches have no bookmarks: read past quiet spells
            "kubernetes": {"read_timeout": "90s"},
        }
        cfg = bridge_config(tmp_path, nats_server.url, kubeconfig, **deep_merge(base, sections))
        return bridges.start(cfg)

    yield start
    bridges.kill_all()


class Subscriber:
    """A team's subscriber: a JetStream ordered consumer with one subject filter, from the
    stream's start, holding every CloudEvent it got."""

    def __init__(self, url: str, filter_subject: str) -> None:
        self.url = url
        self.filter = filter_subject
        self.events: list[Received] = []

    async def __aenter__(self) -> Subscriber:
        self.nc = await nats.connect(self.url)
        js = self.nc.jetstream()
        self.sub = await js.subscribe(
            self.filter, stream="K8S_EVENTS", ordered_consumer=True, cb=self._got
        )
        return self

    async def _got(self, msg: Any) -> None:
        self.events.append(cloudevent(msg.subject, dict(msg.headers or {}), msg.data))

    async def received(self) -> list[Received]:
        return list(self.events)

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.sub.unsubscribe()
        await self.nc.close()


class RequestGate(LatencyProxy):
    """k8s_event_sim.tcpproxy's proxy that can also hold what the client sends while it passes on
    what the server sends (``hold_requests``): an open watch goes on streaming, a new request
    (a lookup) is never answered, as when the way to the API server fails one way, or it stops
    serving requests but not its open streams."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        super().__init__(upstream_host, upstream_port)
        self._requests = asyncio.Event()
        self._requests.set()

    def hold_requests(self) -> None:
        self._requests.clear()

    def pass_requests(self) -> None:
        self._requests.set()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await super()._serve(_Held(client_r, self._requests), client_w)  # type: ignore[arg-type]


class _Held:
    """A stream reader whose reads are handed on only while ``gate`` is open."""

    def __init__(self, reader: asyncio.StreamReader, gate: asyncio.Event) -> None:
        self._reader = reader
        self._gate = gate

    async def read(self, n: int) -> bytes:
        data = await self._reader.read(n)
        await self._gate.wait()
        return data


def through(proxy: LatencyProxy, kubeconfig: Path, tmp_path: Path) -> Path:
    """A copy of ``kubeconfig`` that reaches the API server through ``proxy``."""
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = proxy.url
    proxied = tmp_path / "proxied.kubeconfig"
    proxied.write_text(yaml.safe_dump(doc))
    return proxied


# ----------------------------------------------------------------------------- checks


async def exactly_the_truth(
    received: Callable[[], Awaitable[list[Received]]],
    truth: Truth,
    namespaces: set[str],
    timeout: float = 120,
) -> dict[str, Received]:
    """Every version the truth saw in ``namespaces`` is among ``received()`` once, and nothing
    else is (what it holds, the truth has seen too: waited for, the truth's watch may be
    behind the bridge's). Returns id -> (attributes, data)."""

    def wanted() -> set[str]:
        return {i for i, e in truth.versions.items() if e["metadata"]["namespace"] in namespaces}

    async def missing() -> set[str]:
        return wanted() - {a["id"] for a, _ in await received()}

    try:
        await eventually(lambda: _none(missing), timeout, 0.5, what="every version received")
    except NotMet:
        gone = await missing()
        raise AssertionError(
            f"{len(gone)} of {len(wanted())} versions missing: "
            f"{sorted((i, truth.versions[i]['reason']) for i in gone)[:20]}"
        ) from None
    got = await received()
    ids = [a["id"] for a, _ in got]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    assert not dups, f"received more than once: {dups}"
    try:
        await eventually(
            lambda: set(ids) <= wanted(), 30, 0.2, what="the truth saw all that was received"
        )
    except NotMet:
        extra = [(a["id"], a["nats-subject"]) for a, _ in got if a["id"] not in wanted()]
        raise AssertionError(f"received, but not in {sorted(namespaces)}: {extra[:20]}") from None
    return {a["id"]: (a, d) for a, d in got}


async def _none(check: Callable[[], Awaitable[set[str]]]) -> bool:
    return not await check()


def assert_cloudevent(
    attrs: dict[str, Any], data: dict[str, Any], ev: dict[str, Any], team: str
) -> None:
    """The CloudEvent of ``ev`` (the Event as the truth saw it): the documented attributes,
    the team of its namespace, the subject the template makes, the Event unchanged as data."""
    want = expected_attributes(ev)
    want.pop("nats-subject")  # the default template's; this one has the team in it
    got = {k: attrs.get(k) for k in want}
    assert got == want, f"{attrs['id']} ({ev['reason']}): {got} != {want}"
    inv = ev.get("involvedObject") or {}
    tokens = (CLUSTER, team, ev["metadata"]["namespace"], inv.get("kind"), ev["reason"])
    assert attrs["nats-subject"] == ".".join([PREFIX, *map(token, tokens)])
    assert attrs.get("team") == team, attrs
    meta = {k: v for k, v in ev["metadata"].items() if k != "managedFields"}
    assert data == {**ev, "metadata": meta}, attrs["id"]


def enrichment_of(attrs: dict[str, Any]) -> dict[str, Any]:
    keys = ("team", "app", "ownerkind", "ownername", "k8senriched", "k8senrichmissing")
    return {k: attrs[k] for k in keys if k in attrs}


# ----------------------------------------------------------------------------- tests


@pytest.mark.timeout(300)  # a crash loop in two namespaces, watched until its Events bump
async def test_each_team_takes_exactly_its_namespaces_events_with_one_subject_filter(
    living_cluster: LivingCluster,
    enrich_kubeconfig: Path,
    team_namespace: Callable[[str], str],
    start_bridge: Callable[..., BridgeProcess],
    nats_server: Any,
) -> None:
    """Two namespaces labelled team=shop and team=payments, each with a crash-looping
    Deployment. Each team's subscriber (one subject filter, ``<prefix>.<cluster>.<team>.*.*.*``)
    gets exactly its namespace's Events; each carries its team, and every Event of an object
    of the Deployment (a Pod, its ReplicaSet, the Deployment) its top controller, the Pod's app
    label for a Pod's, and ``k8senriched: complete`` (no Pod is deleted)."""
    teams = {team: team_namespace(team) for team in ("shop", "payments")}
    bridge = start_bridge(
        enrich_kubeconfig,
        filter={"namespaces": sorted(teams.values())},
        # a lookup held up by a busy machine must not turn an Event partial here
        enrich={"lookup_timeout": "20s"},
    )
    # the bridge runs with exactly the rules its config needs: those deploy/ grants for it
    role = next(
        d for d in yaml.safe_load_all(ENRICH_RBAC.read_text()) if d["kind"] == "ClusterRole"
    )
    assert rules(load(str(bridge.config))) == role["rules"]
    await bridge.wait_ready(timeout=60)
    async with contextlib.AsyncExitStack() as stack:
        subscribers = {
            team: await stack.enter_async_context(
                Subscriber(
                    nats_server.url, subject_filter(PREFIX, TEMPLATE, cluster=CLUSTER, team=team)
                )
            )
            for team in teams
        }
        truth = await stack.enter_async_context(Truth(living_cluster))
        for team, ns in teams.items():
            living_cluster.apply(deployment(f"{team}-api", ns, 2, labels={CRASHLOOP_LABEL: "true"}))

        def looping(ns: str) -> bool:
            """BackOff bumped on both Pods: versions of Events about cached objects too."""
            bumped = {
                e["involvedObject"]["name"]
                for e in truth.of("BackOff", ns)
                if e.get("count", 0) >= 2
            }
            return len(bumped) >= 2

        await eventually(
            lambda: all(looping(ns) for ns in teams.values()),
            timeout=180,
            interval=0.5,
            what="a crash loop in both namespaces, each Pod's BackOff bumped",
        )
        for team, ns in teams.items():
            got = await exactly_the_truth(subscribers[team].received, truth, {ns})
            pods = {p["metadata"]["uid"] for p in living_cluster.pods(ns, f"{team}-api")}
            kinds: dict[str, int] = {}
            for i, (attrs, data) in got.items():
                ev = truth.versions[i]
                assert_cloudevent(attrs, data, ev, team)
                inv = ev["involvedObject"]
                kinds[inv["kind"]] = kinds.get(inv["kind"], 0) + 1
                if inv["kind"] not in OWNED:
                    continue
                enriched = enrichment_of(attrs)
                want = {
                    "team": team,
                    "ownerkind": "Deployment",
                    "ownername": f"{team}-api",
                    "k8senriched": "complete",
                }
                if inv["kind"] != "Deployment":
                    want["app"] = f"{team}-api"  # the Pods' label, and the ReplicaSet's
                if inv["kind"] == "Pod" and inv.get("uid") not in pods:
                    continue  # a Pod gone since: nothing to assert of its lookups
                assert enriched == want, (i, ev["reason"], inv, enriched)
            # the cluster wrote what this is about: a Pod's, a ReplicaSet's, a Deployment's
            assert {"Pod", "ReplicaSet", "Deployment"} <= set(kinds), kinds
            assert all(s.startswith(f"{PREFIX}.{CLUSTER}.{team}.{ns}.") for s in _subjects(got))


def _subjects(got: dict[str, Received]) -> list[str]:
    return [a["nats-subject"] for a, _ in got.values()]


@pytest.mark.timeout(300)
async def test_the_api_server_unreachable_mid_stream_loses_nothing_and_marks_what_it_could_not_read(
    living_cluster: LivingCluster,
    enrich_kubeconfig: Path,
    team_namespace: Callable[[str], str],
    start_bridge: Callable[..., BridgeProcess],
    nats_server: Any,
    tmp_path: Path,
) -> None:
    """The bridge reaches the API server through a proxy (the cluster's components do not).
    A crash loop runs; then

    1. the proxy holds the bridge's requests (its open watches go on streaming): the
       Deployment is scaled up, the new Pods' Events are read, their lookups are never
       answered: they go out after ``enrich.lookup_timeout`` marked ``object:timeout``, then,
       reads paused, at once marked ``object:unreachable``;
    2. the link breaks (every connection closed, the port refuses): the cluster goes on
       writing, the bridge publishes ``apiserver_unreachable``;
    3. it comes back: the bridge resumes its watch.

    Every version the truth saw is in the stream once; each Event is complete or partial with
    only object/owner timeout or unreachable missing, never without its team (the namespace
    values come from a watch and stay); at least one was marked."""
    team = "shop"
    ns = team_namespace(team)
    proxy = RequestGate("127.0.0.1", living_cluster.apiserver.port)
    await proxy.start()
    try:
        bridge = start_bridge(
            through(proxy, enrich_kubeconfig, tmp_path),
            filter={"namespaces": [ns]},
            enrich={"lookup_timeout": "2s"},
        )
        await bridge.wait_ready(timeout=60)
        async with Truth(living_cluster) as truth:
            living_cluster.apply(deployment("api", ns, 2, labels={CRASHLOOP_LABEL: "true"}))

            async def published(check: Callable[[dict[str, Any]], bool]) -> bool:
                return any(check(a) for a, _ in await stream_events(nats_server.url))

            # the objects of the loop read and cached, while all is well
            await eventually(
                lambda: published(
                    lambda a: a["k8sreason"] == "BackOff" and a["k8senriched"] == "complete"
                ),
                timeout=120,
                interval=0.5,
                what="a complete BackOff published",
            )
            # 1. requests held: what the open watch brings about new Pods can not be looked up
            proxy.hold_requests()
            living_cluster.kubectl("scale", "deployment", "api", "-n", ns, "--replicas=4")
            await eventually(
                lambda: published(lambda a: a.get("k8senriched") == "partial"),
                timeout=120,
                interval=0.5,
                what="an Event published without its lookups while requests are held",
            )
            # 2. the link breaks; the cluster goes on writing
            await proxy.stop()
            await eventually(
                lambda: status_events(nats_server.url, "apiserver_unreachable"),
                timeout=60,
                what="apiserver_unreachable",
            )
            cut_at = len(truth.kept(None))
            await eventually(
                lambda: len(truth.kept(None)) >= cut_at + 5,
                timeout=60,
                interval=0.5,
                what="the cluster writing while the bridge is cut off",
            )
            # 3. it comes back
            proxy.pass_requests()
            await proxy.start()
            got = await exactly_the_truth(
                lambda: stream_events(nats_server.url), truth, {ns}, timeout=120
            )
            assert await status_events(nats_server.url, "apiserver_reachable")
    finally:
        proxy.pass_requests()
        await proxy.stop()
    marked: dict[str, list[str]] = {}
    for i, (attrs, data) in got.items():
        ev = truth.versions[i]
        assert_cloudevent(attrs, data, ev, team)
        if attrs["k8senriched"] == "partial":
            missing = attrs["k8senrichmissing"].split(",")
            marked[i] = missing
            for item in missing:
                part, _, why = item.partition(":")
                assert part in ("object", "owner") and why in ("timeout", "unreachable"), (
                    i,
                    ev["reason"],
                    missing,
                )
        else:
            assert attrs["k8senriched"] == "complete" and "k8senrichmissing" not in attrs
            if ev["involvedObject"]["kind"] in OWNED:
                assert attrs.get("ownername") == "api", (i, enrichment_of(attrs))
    assert marked, "no Event was marked while the bridge's lookups could not be answered"
    print(
        f"{len(got)} versions, {len(marked)} marked: "
        f"{sorted({m for ms in marked.values() for m in ms})}"
    )


async def post_events(
    cp: ControlPlane, bodies: Iterable[dict[str, Any]], concurrency: int = 32
) -> list[str]:
    """POST each Event with the admin identity, ``concurrency`` at a time; the id
    (``<uid>/<resourceVersion>``) of each."""
    ids: list[str] = []
    todo = iter(bodies)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=cp.ssl_context(), limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=120),
    ) as session:

        async def worker() -> None:
            for body in todo:
                ns = body["metadata"]["namespace"]
                url = f"{cp.url}/api/v1/namespaces/{ns}/events"
                async with session.post(url, json=body) as r:
                    text = await r.text()
                    assert r.status == 201, text
                m = json.loads(text)["metadata"]
                ids.append(f"{m['uid']}/{m['resourceVersion']}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    await asyncio.sleep(0.25)  # let aiohttp close its TLS transports
    return ids


def ghost_events(namespace: str, n: int, seed: int = 11) -> Iterator[dict[str, Any]]:
    """``n`` Events, each about another Pod that does not exist."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    for i in range(n):
        body = make_event(
            rng,
            namespace=namespace,
            now=now,
            style="core",
            reason="BackOff",
            kind="Pod",
            name=f"ghost-{i:06d}",
            count=1,
        )
        body["metadata"].pop("managedFields", None)
        yield body


@pytest.fixture
async def own_control_plane(
    control_plane_factory: Callable[..., ControlPlane],
) -> AsyncIterator[ControlPlane]:
    """A control plane of the test's own, stopped at its end (its Events are many: no other
    test lists them)."""
    cp = control_plane_factory()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.mark.timeout(1200)  # 50k Events written, read, looked up and published
async def test_events_about_many_distinct_objects_keep_the_cache_and_the_memory_bounded(
    own_control_plane: ControlPlane,
    kubernetes_version: str,
    start_bridge: Callable[..., BridgeProcess],
    nats_server: Any,
) -> None:
    """Events about N distinct Pods that do not exist (N = 10k on the newest version, 3k on
    the oldest, or $K8S_EVENT_BRIDGE_E2E_DISTINCT_OBJECTS), POSTed 32 at a time while the
    bridge runs: every one is published once, each with its team and ``k8senrichmissing:
    object:notfound`` (one read each, the answers cached as "not found"; no read is timed out,
    so that mark does not depend on the machine's speed); the lookup cache
    never holds more than ``enrich.cache_entries`` (it reaches it) nor more bytes than
    ``enrich.cache_bytes``, nor do more Events wait for
    their lookups than ``enrich.max_pending`` (/status internals, sampled), and the bridge's
    peak RSS stays within ``Budget.of(settings)`` (bench/budget.py)."""
    # 50,000 cost about 3 minutes of CI on 2 cores: K8S_EVENT_BRIDGE_E2E_DISTINCT_OBJECTS=50000
    # runs the figure (bench.enrich runs 50,000 on the simulator)
    default = 10_000 if kubernetes_version == version_named("newest") else 3_000
    n = int(os.environ.get("K8S_EVENT_BRIDGE_E2E_DISTINCT_OBJECTS", default))
    cp = own_control_plane
    kubeconfig = grant_enrichment(cp)
    ns = f"ghosts-{next(_ns)}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("label", "namespace", ns, "team=shop")
    bridge = start_bridge(
        kubeconfig,
        filter={"namespaces": [ns]},
        cloudevents={"mode": "binary"},  # the extensions in headers: the stream read headers-only
        # no read is cut short: each Event's mark is the API server's answer (404: notfound),
        # whatever the machine's speed (with 20 s, a loaded machine turned some reads into
        # object:timeout, and the back-off after one into object:unreachable); a read that
        # never answers fails the test by its own timeout, before this one
        enrich={"lookup_timeout": "1h", "cache_entries": CACHE_ENTRIES},
        log={"level": "info"},
    )
    settings = load(str(bridge.config))
    budget = Budget.of(settings)
    await bridge.wait_ready(timeout=60)
    assert bridge.proc is not None
    pid = bridge.proc.pid
    samples: list[dict[str, int]] = []

    async def sample() -> None:
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                _, text = await bridge.get("/status")
                internals = json.loads(text)["internals"]
                samples.append(
                    {
                        "cache": internals["enrich_cache"],
                        "cache_bytes": internals["enrich_cache_bytes"],
                        "pending": internals["enrich_pending"],
                    }
                )
            await asyncio.sleep(0.5)  # pacing: the sample interval

    sampler = asyncio.create_task(sample())
    t0 = time.monotonic()
    try:
        ids = await post_events(cp, ghost_events(ns, n))
        written_s = time.monotonic() - t0
        await eventually(
            lambda: _at_least(bridge, "events_published", n + 1),  # and the status event
            timeout=900,
            interval=1,
            what=f"{n} Events published",
        )
        published_s = time.monotonic() - t0
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    peak_kib = memory_kb(pid)["VmHWM"]
    bridge_cpu = cpu_seconds(pid)
    _, text = await bridge.get("/status")
    internals = json.loads(text)["internals"]
    messages = [
        (s, h)
        for s, h, _ in await stream_messages(nats_server.url, headers_only=True)
        if "._bridge." not in s
    ]
    got = [h["Nats-Msg-Id"] for _, h in messages]
    assert len(got) == len(set(got)), "duplicates in the stream"
    assert sorted(got) == sorted(ids)
    for subject, h in messages:
        assert subject.startswith(f"{PREFIX}.{CLUSTER}.shop.{ns}.Pod.BackOff"), subject
        attrs = {k[3:]: v for k, v in h.items() if k.startswith("ce-")}
        enriched = {k: attrs.get(k) for k in ("team", "k8senriched", "k8senrichmissing", "app")}
        assert {k: _unquote(v) for k, v in enriched.items()} == {
            "team": "shop",
            "k8senriched": "partial",
            "k8senrichmissing": "object:notfound",
            "app": None,
        }, (subject, h)
    assert samples, "no /status sample was taken"
    every = [*samples, _sample(internals)]
    cache_max = max(s["cache"] for s in every)
    bytes_max = max(s["cache_bytes"] for s in every)
    assert cache_max <= CACHE_ENTRIES, cache_max
    assert internals["enrich_cache"] == CACHE_ENTRIES, internals  # reached: it evicted
    assert bytes_max <= settings.enrich.cache_bytes, bytes_max
    # the Events waiting for their lookups: bounded too (the watch waits)
    assert max(s["pending"] for s in samples) <= settings.enrich.max_pending, samples
    assert peak_kib / 1024 <= budget.total_mib, (peak_kib / 1024, budget.rows())
    print(
        f"{kubernetes_version}: {n} distinct objects: written in {written_s:.0f}s, "
        f"all published after {published_s:.0f}s; cache max {cache_max} entries / "
        f"{bytes_max} bytes; peak RSS {peak_kib / 1024:.1f} MiB of a bound of "
        f"{budget.total_mib:.1f} MiB; {await bridge.metric('enrich_reads'):.0f} reads; "
        f"the bridge's CPU {bridge_cpu:.0f}s"
    )


def _sample(internals: dict[str, Any]) -> dict[str, int]:
    return {"cache": internals["enrich_cache"], "cache_bytes": internals["enrich_cache_bytes"]}


async def _at_least(bridge: BridgeProcess, metric: str, n: int) -> bool:
    return await bridge.metric(metric) >= n


def _unquote(v: str | None) -> str | None:
    return None if v is None else unquote(v)


@pytest.mark.timeout(180)
async def test_a_first_start_with_a_maximum_age_publishes_only_the_recent_events(
    living_cluster: LivingCluster,
    enrich_kubeconfig: Path,
    team_namespace: Callable[[str], str],
    start_bridge: Callable[..., BridgeProcess],
    nats_server: Any,
) -> None:
    """A namespace with history: Events that last happened 40 minutes to 3 hours ago (by
    lastTimestamp, or eventTime alone) and recent ones (a minute to 20 minutes ago, one first
    seen 3 hours ago but repeated since). A bridge with ``kubernetes.initial: 30m`` and no
    checkpoint publishes only the recent ones, and its ``started`` status event says how many
    it skipped; an old-dated Event written once it watches is published (the age is for the
    first list only)."""
    ns = team_namespace("history")
    now = datetime.now(UTC)
    rng = random.Random(5)

    def event(ago: timedelta, style: Style = "core", count: int = 1) -> dict[str, Any]:
        body = make_event(
            rng, namespace=ns, now=now - ago, style=style, reason="BackOff", kind="Pod", count=count
        )
        body["metadata"].pop("managedFields", None)
        return body

    old = [
        event(timedelta(hours=2)),
        event(timedelta(hours=3), count=4),
        event(timedelta(minutes=40)),
        event(timedelta(hours=2), style="events.k8s.io", count=1),  # eventTime only
    ]
    recent = [
        event(timedelta(minutes=1)),
        event(timedelta(minutes=20), count=3),  # first seen well before, last 20 minutes ago
        event(timedelta(seconds=5), style="events.k8s.io", count=1),
    ]
    recent[1]["firstTimestamp"] = (now - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ids = {
        name: await post_events(living_cluster, bodies)
        for name, bodies in (("old", old), ("recent", recent))
    }
    bridge = start_bridge(enrich_kubeconfig, kubernetes={"namespaces": [ns], "initial": "30m"})
    await bridge.wait_ready(timeout=60)
    started = await eventually(
        lambda: status_events(nats_server.url, "started"), timeout=60, what="started"
    )
    assert len(started) == 1, started
    report = started[0]["data"]["initial"][ns]
    assert report["skipped"] == len(old), report
    assert report["published"] == len(recent), report
    assert report["undated"] == 0 and report["max_age"] == "30m", report

    async def published() -> list[str]:
        return [a["id"] for a, _ in await stream_events(nats_server.url)]

    await eventually(
        lambda: _contains(published, ids["recent"]), timeout=60, what="the recent Events"
    )
    assert sorted(await published()) == sorted(ids["recent"])
    # watched from the list's end: an Event is published whatever its age
    late = await post_events(living_cluster, [event(timedelta(hours=2))])
    await eventually(lambda: _contains(published, late), timeout=60, what="a late old Event")
    assert sorted(await published()) == sorted(ids["recent"] + late)
    assert await bridge.metric("events_too_old") == len(old)


async def _contains(read: Callable[[], Awaitable[list[str]]], ids: list[str]) -> bool:
    return set(ids) <= set(await read())
