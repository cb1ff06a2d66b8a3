"""The bridge process through faults: NATS outage, compaction, API errors, bad lines,
rotated credentials, and a narrow filter kept alive by bookmarks."""

import asyncio
import signal

import msgspec
import nats as nats_client
import pytest

from tests.integration.harness import (
    Writer,
    all_of,
    bridge_config,
    checkpoint,
    event_ids,
    logged,
    metric_at_least,
    outage_ended,
    readyz,
    status_events,
    watch_requests,
)
from tests.streams import k8s_events
from tests.support import eventually, rss_kib, write_kubeconfig

pytestmark = pytest.mark.integration


async def test_nats_outage_pauses_the_watch_bounds_memory_and_loses_nothing(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    bridge = run_bridge(
        queue={"max_events": 100}, nats={"max_inflight": 50, "ack_timeout": "500ms"}
    )
    await bridge.wait_ready()
    await w.write(200, rate=2000)
    await all_of(nats_server.url, w.ids)
    rss_before = rss_kib(bridge.proc.pid)
    nats_server.kill()
    await w.write(3000, rate=5000, bump_ratio=0.3)  # all of it written during the outage
    received = await bridge.metric("events_received")
    published = await bridge.metric("events_filtered") + await bridge.metric("events_published")
    # the watch stops reading once the queue is full: at most queue + window are held
    assert received - 200 <= 100 + 50 + 2, (received, published)
    queued = await bridge.metric("queue_depth")
    inflight = await bridge.metric("publish_inflight")
    assert queued <= 100
    # and what is held is counted as received (published includes the status events "started"
    # and "apiserver_reachable", the scope's first answer)
    assert received + 2 >= published + queued + inflight, (received, published, queued, inflight)
    assert rss_kib(bridge.proc.pid) - rss_before < 20 * 1024
    nats_server.start()  # same port, same store
    ids = await all_of(nats_server.url, w.ids, timeout=60)
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(w.ids)


async def test_compaction_while_stopped_relists_without_duplicates_and_reports_gap(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    await w.write(60, bump_ratio=0.0)
    await all_of(nats_server.url, w.ids)
    bridge.signal(signal.SIGTERM)
    assert await bridge.wait_exit() == 0
    cp = await checkpoint(nats_server.url)
    before = set(await event_ids(nats_server.url))
    await w.write(200, rate=5000, bump_ratio=0.6)  # bumps make versions that will be lost
    sim.compact()
    again = run_bridge()
    await again.wait_ready()
    newest = set(w.latest.values())

    async def caught_up():
        have = set(await event_ids(nats_server.url))
        return have if newest <= have else None

    have_set = await eventually(caught_up, timeout=30)
    ids = await event_ids(nats_server.url)
    assert len(ids) == len(set(ids)), "duplicates after the relist"
    assert before <= have_set
    assert newest <= have_set, "the newest version of some Event is missing"
    gaps = await status_events(nats_server.url, "gap")
    assert len(gaps) == 1
    assert gaps[0]["data"]["fromResourceVersion"] == str(cp)
    assert int(gaps[0]["data"]["toResourceVersion"]) >= sim.compacted
    assert gaps[0]["data"]["certainty"] == "likely"  # bumped Events listed: versions are gone
    assert await again.metric("relists") == 0  # the first list of this process
    assert any(e.get("event") == "resource_version_expired" for e in again.log_events())


async def test_api_errors_429_5xx_and_resets_are_recovered(sim, nats_server, run_bridge):
    w = Writer(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    sim.faults.status_next = [(429, {"Retry-After": "1"}), (503, {}), (500, {})]
    sim.faults.reset_next = 2
    sim.close_watches()
    await w.write(100)
    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)
    assert sim.faults.injected["reset"] >= 2
    assert not sim.faults.status_next
    assert await bridge.metric("watch_restarts", 'cause="error"') >= 5


async def test_mid_stream_resets_and_refused_connections_are_recovered(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    sim.faults.reset_watches_after = 25
    await w.write(200, rate=1000)
    await sim.refuse_connections()
    await w.write(100, rate=2000)
    await eventually(lambda: _apiserver_reachable(bridge, 0), timeout=15)
    # unhealthy for longer than http.unready_after (2 s here): out of the Service
    await eventually(lambda: readyz(bridge, 503, "watch"), timeout=15)
    await sim.accept_connections()
    sim.faults.reset_watches_after = None
    ids = await all_of(nats_server.url, w.ids)
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(w.ids)
    await eventually(lambda: outage_ended(nats_server.url), timeout=15)


async def _apiserver_reachable(bridge, value):
    return await bridge.metric("apiserver_reachable") == value


async def test_malformed_and_split_lines_are_skipped_or_reassembled(sim, nats_server, run_bridge):
    w = Writer(sim)
    sim.faults.malformed_every = 5
    sim.faults.split_lines = True
    bridge = run_bridge()
    await bridge.wait_ready()
    await w.write(300)
    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)
    assert await bridge.metric("input_skipped", 'reason="malformed_line"') >= 10
    assert await bridge.metric("input_skipped", 'reason="unknown_type"') >= 5
    assert sim.faults.injected["split_chunk"] > 100  # lines really arrived in pieces


async def test_401_then_rotated_token_file_recovers(tmp_path, sim, nats_server, run_bridge):
    token_file = tmp_path / "token"
    token_file.write_text("first-token")
    sim.tokens = {"first-token"}
    kubeconfig = write_kubeconfig(tmp_path / "kc-token", sim.url, token_file=str(token_file))
    w = Writer(sim)
    bridge = run_bridge(kubernetes={"kubeconfig": str(kubeconfig)})
    await bridge.wait_ready()
    await w.write(20)
    await all_of(nats_server.url, w.ids)
    sim.tokens = {"second-token"}  # the server rotated: the old token is refused
    sim.close_watches()
    await eventually(lambda: metric_at_least(bridge, "kube_auth_failures", 1), timeout=15)
    token_file.write_text("second-token")
    await w.write(50)
    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)
    denied = [e for e in bridge.log_events() if e.get("event") == "kube_permission_denied"]
    assert denied and denied[0]["status"] == 401


async def test_narrow_filter_checkpoint_advances_by_bookmarks(sim, nats_server, run_bridge):
    sim.bookmark_interval = 0.3  # where a server sends them (the watch cache does)
    w = Writer(sim)
    bridge = run_bridge(filter={"reasons": ["OOMKilling"]})
    await bridge.wait_ready()
    await w.write(150, reason="BackOff", bump_ratio=0.2)
    top = sim.resource_version

    async def advanced():
        cp = await checkpoint(nats_server.url)
        return cp is not None and cp >= top

    await eventually(advanced, timeout=20)
    assert await event_ids(nats_server.url) == []  # nothing matched the filter
    bridge.signal(signal.SIGTERM)
    assert await bridge.wait_exit() == 0
    sim.compact()  # history before the checkpoint is gone: resuming must not need it
    oom = w.create(reason="OOMKilling")
    again = run_bridge(filter={"reasons": ["OOMKilling"]})
    await again.wait_ready()
    await all_of(nats_server.url, [oom])
    assert not any(e.get("event") == "resource_version_expired" for e in again.log_events())
    assert await status_events(nats_server.url, "gap") == []
    watch_queries = [r.query for r in watch_requests(sim)]
    assert watch_queries
    assert all(q.get("fieldSelector") == "reason=OOMKilling" for q in watch_queries)


async def test_a_quiet_scope_without_bookmarks_is_not_an_outage(sim, nats_server, run_bridge):
    """A default kube-apiserver sends no bookmarks on Event watches: a scope with nothing new
    is silent for many read timeouts. That is a normal close and a re-watch each time: no
    warning, no apiserver_unreachable, still ready, and nothing lost when Events come."""
    assert sim.bookmark_interval is None  # the simulator is as harsh as the real server
    w = Writer(sim)
    await w.write(5, bump_ratio=0.0)  # a first list sees newest versions only
    bridge = run_bridge(kubernetes={"read_timeout": "1s"})
    await bridge.wait_ready()
    await all_of(nats_server.url, w.ids)
    await eventually(lambda: metric_at_least(bridge, "watch_restarts", 4), timeout=20)
    assert await bridge.metric("watch_restarts", 'cause="quiet"') >= 4
    assert await bridge.metric("watch_restarts", 'cause="error"') == 0
    assert await status_events(nats_server.url, "apiserver_unreachable") == []
    assert [e for e in bridge.log_events() if e.get("level") in ("warning", "error")] == []
    assert await readyz(bridge, 200)
    await w.write(20)
    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)


async def test_stalled_watch_is_noticed_by_the_read_timeout(sim, nats_server, run_bridge):
    w = Writer(sim)
    bridge = run_bridge(kubernetes={"read_timeout": "1s"})
    await bridge.wait_ready()
    sim.faults.stall_watches = True  # connections stay open, nothing is sent, not even bookmarks
    sim.close_watches()
    await w.write(30)
    await eventually(lambda: metric_at_least(bridge, "watch_restarts", 3), timeout=20)
    sim.faults.stall_watches = False
    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)
    assert sim.faults.injected["stall"] >= 1


async def test_jetstream_silent_for_a_while_holds_memory_flat_and_loses_nothing(
    sim, nats_server, run_bridge
):
    """NATS connected, JetStream answering nothing (an R3 stream without quorum): a plain
    nats-server on the same port, where a subscriber takes the publishes and answers none.
    Every message in the window goes again each ack_timeout, Events keep coming; the bridge's
    memory stays flat, and once JetStream is back the stream is the truth."""
    from k8s_event_sim.natsserver import NatsServer

    w = Writer(sim)
    # a small queue fills within the warm-up, so what is measured after it is the retrying
    bridge = run_bridge(queue={"max_events": 200}, nats={"ack_timeout": "100ms"})
    await bridge.wait_ready()
    await w.write(100, rate=2000)
    await all_of(nats_server.url, w.ids)
    nats_server.kill()
    plain = NatsServer(
        store_dir=nats_server.store_dir + "-plain", port=nats_server.port, jetstream=False
    ).start()
    try:
        nc = await nats_client.connect(plain.url)
        taken = 0

        async def take(msg):
            nonlocal taken
            taken += 1

        await nc.subscribe("k8s.events.>", cb=take)
        writing = asyncio.create_task(w.write(6000, rate=200, bump_ratio=0.3))
        await eventually(lambda: metric_at_least(bridge, "nats_connected", 1), timeout=20)
        await asyncio.sleep(5)  # warm-up: the queue and the window fill
        rss = [rss_kib(bridge.proc.pid)]
        for _ in range(4):
            await asyncio.sleep(5)
            rss.append(rss_kib(bridge.proc.pid))
        retries = await bridge.metric("publish_retries")
        assert taken > 10 * 1024 and retries > 10 * 1024  # the window was sent again and again
        assert max(rss) - rss[0] < 3 * 1024, rss  # KiB: flat while it lasts
        await nc.close()
    finally:
        plain.cleanup()
    nats_server.start()  # JetStream again, same port, same store
    await writing
    ids = await all_of(nats_server.url, w.ids, timeout=90)
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(w.ids)


async def test_sigterm_with_nats_down_and_a_full_queue_still_exits_in_time(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    bridge = run_bridge(queue={"max_events": 5}, shutdown={"drain_timeout": "2s"})
    await bridge.wait_ready()
    await eventually(lambda: checkpoint(nats_server.url))  # a place to resume from
    nats_server.kill()
    await w.write(50, rate=2000)
    await eventually(lambda: metric_at_least(bridge, "queue_depth", 5), timeout=10)
    bridge.signal(signal.SIGTERM)
    assert await bridge.wait_exit(timeout=15) == 0
    assert any(e.get("event") == "drain_timeout" for e in bridge.log_events())
    nats_server.start()  # nothing was lost: the restart reads it again
    again = run_bridge()
    await again.wait_ready()
    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)


async def test_deleted_stream_is_recreated_and_publishing_resumes(sim, nats_server, run_bridge):
    import nats as nats_client

    w = Writer(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    await w.write(20)
    await all_of(nats_server.url, w.ids)
    nc = await nats_client.connect(nats_server.url)
    await nc.jetstream().delete_stream("K8S_EVENTS")
    await nc.close()
    later = Writer(sim, seed=2)
    await later.write(20, bump_ratio=0.0)

    async def later_there():
        try:
            have = set(await event_ids(nats_server.url))
        except Exception:
            return False
        return set(later.ids) <= have

    await eventually(later_there, timeout=30)


async def test_publishes_that_get_no_ack_turn_readyz_503(sim, nats_server, run_bridge):
    import nats as nats_client

    w = Writer(sim)
    bridge = run_bridge(nats={"create_stream": False})
    # the operator's stream, created before the bridge starts
    nc = await nats_client.connect(nats_server.url)
    await nc.jetstream().add_stream(k8s_events())
    await bridge.wait_ready()
    await nc.jetstream().delete_stream("K8S_EVENTS")
    await w.write(10)
    await eventually(lambda: readyz(bridge, 503, "JetStream ack"), timeout=20)
    await nc.jetstream().add_stream(k8s_events())
    await nc.close()
    ids = await all_of(nats_server.url, w.ids, timeout=40)
    assert sorted(ids) == sorted(w.ids)
    await eventually(lambda: readyz(bridge, 200, "ready"), timeout=20)


async def test_an_api_server_that_keeps_failing_opens_the_breaker_and_a_relist_waits_for_it(
    sim, nats_server, run_bridge
):
    """Three failed requests in a row open the breaker (`apiserver_degraded`, /status, the
    metric). The history is compacted meanwhile, so a relist is due; while the breaker is not
    healthy the bridge sends cheap probes (one Event, no field selector) instead, and the
    relist (a full page, with the selector) comes only once a probe was answered; nothing
    written meanwhile is lost."""
    w = Writer(sim)
    bridge = run_bridge(
        filter={"types": ["Warning"]},  # pushed to the server as a field selector
        kubernetes={"backoff": {"initial": "100ms"}},
    )
    await bridge.wait_ready()
    await w.write(20, bump_ratio=0.0, type="Warning")
    await all_of(nats_server.url, w.ids)
    await w.write(30, rate=5000, bump_ratio=0.5, type="Warning")  # versions the 410 loses
    sim.compact()
    seen = len(sim.requests)
    # three watches fail, the fourth (the breaker's probe) gets an HTTP 410, the first
    # probe of the list fails too
    sim.faults.status_next = [(503, {})] * 3 + [(410, {})] + [(503, {})]
    sim.close_watches()
    degraded = await eventually(
        lambda: status_events(nats_server.url, "apiserver_degraded"), timeout=60
    )
    assert degraded[0]["data"]["reason"] == "failures"
    assert "3 requests in a row" in degraded[0]["data"]["detail"]
    await eventually(lambda: status_events(nats_server.url, "apiserver_recovered"), timeout=60)
    newest = set(w.latest.values())

    async def caught_up() -> bool:
        return newest <= set(await event_ids(nats_server.url))

    await eventually(caught_up, timeout=60)
    lists = [r.query for r in sim.requests[seen:] if "watch" not in r.query]
    full = [i for i, q in enumerate(lists) if q.get("limit") != "1"]
    assert full, f"no relist after the breaker closed: {lists}"
    probes = lists[: full[0]]
    assert len(probes) == 2 and all("fieldSelector" not in q for q in probes), lists
    assert lists[full[0]].get("fieldSelector") == "type=Warning", lists
    assert not sim.faults.status_next
    _, body = await bridge.get("/status")
    (scope,) = msgspec.json.decode(body)["scopes"].values()
    assert scope["breaker"]["state"] == "healthy"
    assert await bridge.metric("apiserver_breaker_state") == 0
    assert await bridge.metric("apiserver_breaker_opened", 'reason="failures"') == 1


async def test_an_outage_that_fenced_the_leader_ends_with_the_next_leaders_first_answer(
    leasing_sim, nats_server, run_bridge, tmp_path
):
    """The leader tells ``apiserver_unreachable`` and is fenced (exit 1) while the API server is
    away: it never sees it back. The process that leads after it never saw the outage, yet its
    first answer is told, so the stream's last word on the scope is ``apiserver_reachable`` (the
    alerting subscriber's control-plane alert resolves) and its gauge says 1."""
    election = {
        "enabled": True,
        "namespace": "bridge",
        "lease_duration": "3s",
        "renew_deadline": "2s",
        "retry_period": "500ms",
    }
    sim = leasing_sim
    kubeconfig = write_kubeconfig(tmp_path / "leasing-kubeconfig", sim.url)

    def start(identity: str):
        cfg = bridge_config(
            tmp_path,
            nats_server.url,
            kubeconfig,
            leader_election={**election, "identity": identity},
        )
        return run_bridge(config=cfg)

    w = Writer(sim)
    leader = start("bridge-a")
    await leader.wait_ready()
    await eventually(lambda: logged(leader, "leading"), timeout=30)
    standby = start("bridge-b")
    await standby.wait_ready()
    await w.write(20)
    await all_of(nats_server.url, w.ids)
    await sim.refuse_connections()
    assert await leader.wait_exit(timeout=30) == 1
    assert await logged(leader, "stopped_fenced")
    await sim.accept_connections()
    await eventually(lambda: logged(standby, "leading"), timeout=30)
    await w.write(20)
    await all_of(nats_server.url, w.ids)

    # in stream order: the fenced leader's outage, then the next leader's first answer
    await eventually(lambda: outage_ended(nats_server.url), timeout=30)
    assert await standby.metric("apiserver_reachable") == 1
