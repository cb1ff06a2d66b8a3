"""The simulated API server over real HTTP: paging, watches, bookmarks, selectors, faults."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest

from k8s_event_sim import SimApiServer, make_event
from k8s_event_sim.waiting import eventually

Obj = dict[str, Any]


@pytest.fixture
async def sim() -> AsyncIterator[SimApiServer]:
    server = SimApiServer(bookmark_interval=0.2)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def add(sim: SimApiServer, n: int, *, seed: int = 1, namespace: str | None = None) -> list[Obj]:
    rng = random.Random(seed)
    return [sim.create_event(make_event(rng, namespace=namespace, i=i)) for i in range(n)]


def event(name: str, namespace: str = "default", **fields: Any) -> Obj:
    body: Obj = {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": name.split(".")[0]},
        "reason": "BackOff",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "count": 1,
    }
    body.update(fields)
    return body


async def get(http: aiohttp.ClientSession, url: str, **params: Any) -> tuple[int, Obj]:
    async with http.get(url, params={k: str(v) for k, v in params.items()}) as resp:
        return resp.status, await resp.json()


async def read_lines(resp: aiohttp.ClientResponse, n: int, within: float = 3.0) -> list[Obj]:
    """Up to n parsed lines; fewer if the stream ends first."""
    out: list[Obj] = []
    async with asyncio.timeout(within):
        while len(out) < n:
            line = await resp.content.readline()
            if not line:
                break
            out.append(msgspec.json.decode(line))
    return out


async def read_to_end(resp: aiohttp.ClientResponse, within: float = 3.0) -> list[bytes]:
    lines = []
    async with asyncio.timeout(within):
        while line := await resp.content.readline():
            lines.append(line)
    return lines


async def read_until_bookmark(resp: aiohttp.ClientResponse, within: float = 3.0) -> list[Obj]:
    """The lines before the first BOOKMARK: with bookmarks on, the history has been sent."""
    out: list[Obj] = []
    async with asyncio.timeout(within):
        while line := await resp.content.readline():
            parsed = msgspec.json.decode(line)
            if parsed["type"] == "BOOKMARK":
                break
            out.append(parsed)
    return out


def rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


# -- lists -------------------------------------------------------------------------------------


async def test_paged_list_returns_every_item_once_at_one_resource_version(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    created = add(sim, 23)
    snapshot_rv = sim.resource_version
    url = f"{sim.url}/api/v1/events"
    status, page = await get(http, url, limit=5)
    assert status == 200
    assert page["kind"] == "EventList"
    assert page["metadata"]["remainingItemCount"] == 18
    names = [item["metadata"]["name"] for item in page["items"]]
    list_rvs = {page["metadata"]["resourceVersion"]}
    # writes between pages must not show up in this list
    sim.create_event(event("late.0000000000000001"))
    sim.delete_event(created[0]["metadata"]["namespace"], created[0]["metadata"]["name"])
    while token := page["metadata"].get("continue"):
        status, page = await get(http, url, limit=5, **{"continue": token})
        assert status == 200
        names += [item["metadata"]["name"] for item in page["items"]]
        list_rvs.add(page["metadata"]["resourceVersion"])
    assert list_rvs == {str(snapshot_rv)}
    assert sorted(names) == sorted(obj["metadata"]["name"] for obj in created)
    assert len(names) == len(set(names)) == 23
    keys = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in created]
    assert names == [key.split("/", 1)[1] for key in sorted(keys)]


async def test_list_items_carry_no_kind_and_unlimited_list_has_no_continue(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    add(sim, 3)
    status, page = await get(http, f"{sim.url}/api/v1/events")
    assert status == 200
    assert len(page["items"]) == 3
    assert "continue" not in page["metadata"]
    assert all("kind" not in item and "apiVersion" not in item for item in page["items"])


async def test_compacted_continue_token_is_410_expired(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    add(sim, 10)
    status, page = await get(http, f"{sim.url}/api/v1/events", limit=4)
    sim.create_event(event("newer.0000000000000001"))
    sim.compact()
    status, body = await get(
        http, f"{sim.url}/api/v1/events", limit=4, **{"continue": page["metadata"]["continue"]}
    )
    assert status == 410
    assert body["kind"] == "Status"
    assert body["reason"] == "Expired"
    assert body["code"] == 410
    assert body["message"].startswith("The provided continue parameter is too old")


async def test_malformed_continue_token_is_400(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    status, body = await get(http, f"{sim.url}/api/v1/events", limit=4, **{"continue": "%%%"})
    assert status == 400
    assert body["reason"] == "BadRequest"


async def test_exact_list_serves_the_past_and_410_once_compacted(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    first = sim.create_event(event("a.0000000000000001"))
    sim.create_event(event("b.0000000000000002"))
    sim.update_event("default", "a.0000000000000001", {"count": 7})
    url = f"{sim.url}/api/v1/events"
    status, page = await get(
        url=url, http=http, resourceVersion=rv(first), resourceVersionMatch="Exact"
    )
    assert status == 200
    assert page["metadata"]["resourceVersion"] == str(rv(first))
    assert [(i["metadata"]["name"], i["count"]) for i in page["items"]] == [
        ("a.0000000000000001", 1)
    ]
    status, page = await get(
        http, url, resourceVersion=rv(first), resourceVersionMatch="NotOlderThan"
    )
    assert page["metadata"]["resourceVersion"] == str(sim.resource_version)
    sim.compact()
    status, body = await get(http, url, resourceVersion=rv(first), resourceVersionMatch="Exact")
    assert (status, body["reason"]) == (410, "Expired")


# -- watches -----------------------------------------------------------------------------------


async def test_watch_from_rv_gets_every_later_change_in_order_then_live(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    start = sim.create_event(event("a.0000000000000001"))
    sim.create_event(event("b.0000000000000002"))
    sim.bump_count("default", "a.0000000000000001")
    sim.delete_event("default", "b.0000000000000002")
    params = {"watch": "true", "resourceVersion": str(rv(start))}
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        assert resp.status == 200
        assert resp.headers["Transfer-Encoding"] == "chunked"
        history = await read_lines(resp, 3)
        sim.create_event(event("c.0000000000000003"))
        live = await read_lines(resp, 1)
    got = [(line["type"], line["object"]["metadata"]["name"]) for line in history + live]
    assert got == [
        ("ADDED", "b.0000000000000002"),
        ("MODIFIED", "a.0000000000000001"),
        ("DELETED", "b.0000000000000002"),
        ("ADDED", "c.0000000000000003"),
    ]
    revisions = [rv(line["object"]) for line in history + live]
    assert revisions == list(range(rv(start) + 1, rv(start) + 5))
    assert history[1]["object"]["count"] == 2


async def test_watch_from_zero_sends_every_object_as_added_in_random_order(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    created = add(sim, 40)
    params = {"watch": "1", "resourceVersion": "0"}
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        lines = await read_lines(resp, 40)
        sim.create_event(event("live.0000000000000001"))
        live = await read_lines(resp, 1)
    assert {line["type"] for line in lines} == {"ADDED"}
    names = [line["object"]["metadata"]["name"] for line in lines]
    assert sorted(names) == sorted(obj["metadata"]["name"] for obj in created)
    assert [rv(line["object"]) for line in lines] != sorted(rv(line["object"]) for line in lines)
    assert live[0]["object"]["metadata"]["name"] == "live.0000000000000001"


async def test_watch_from_compacted_rv_is_200_then_one_error_410_line(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    add(sim, 5)
    sim.compact()
    params = {"watch": "true", "resourceVersion": "2"}
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        assert resp.status == 200
        lines = await read_to_end(resp)
    assert len(lines) == 1
    error = msgspec.json.decode(lines[0])
    assert error["type"] == "ERROR"
    assert error["object"]["code"] == 410
    assert error["object"]["reason"] == "Expired"
    assert error["object"]["message"] == f"too old resource version: 2 ({sim.compacted})"


async def test_bookmarks_advance_to_the_current_revision_when_nothing_matches(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    start = sim.resource_version
    params = {
        "watch": "true",
        "resourceVersion": str(start),
        "allowWatchBookmarks": "true",
        "fieldSelector": "reason=NeverHappens",
    }
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        first = await read_lines(resp, 1)
        add(sim, 7)
        second = await read_lines(resp, 1)
    assert [line["type"] for line in first + second] == ["BOOKMARK", "BOOKMARK"]
    assert rv(first[0]["object"]) == start
    assert rv(second[0]["object"]) == start + 7 == sim.resource_version
    assert second[0]["object"]["kind"] == "Event"


async def test_no_bookmarks_unless_asked(sim: SimApiServer, http: aiohttp.ClientSession) -> None:
    params = {"watch": "true", "resourceVersion": str(sim.resource_version), "timeoutSeconds": "1"}
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        assert await read_to_end(resp) == []


async def test_one_bookmark_just_before_the_timeout_then_a_clean_end(
    http: aiohttp.ClientSession,
) -> None:
    sim = SimApiServer(bookmark_interval=60)
    await sim.start()
    try:
        params = {
            "watch": "true",
            "resourceVersion": str(sim.resource_version),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "1",
        }
        started = time.monotonic()
        async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
            lines = await read_to_end(resp)
        elapsed = time.monotonic() - started
    finally:
        await sim.stop()
    assert [msgspec.json.decode(line)["type"] for line in lines] == ["BOOKMARK"]
    assert 0.9 <= elapsed < 2.0


async def test_namespaced_watch_and_list_see_only_that_namespace(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    start = sim.resource_version
    sim.create_event(event("a.0000000000000001", namespace="payments"))
    sim.create_event(event("b.0000000000000002", namespace="default"))
    sim.create_event(event("c.0000000000000003", namespace="payments-eu"))
    _, page = await get(http, f"{sim.url}/api/v1/namespaces/payments/events", limit=1)
    assert [i["metadata"]["name"] for i in page["items"]] == ["a.0000000000000001"]
    assert "continue" not in page["metadata"]
    params = {"watch": "true", "resourceVersion": str(start), "allowWatchBookmarks": "true"}
    async with http.get(f"{sim.url}/api/v1/namespaces/payments/events", params=params) as resp:
        lines = await read_until_bookmark(resp)
    assert [line["object"]["metadata"]["name"] for line in lines] == ["a.0000000000000001"]


async def test_close_watches_ends_streams_cleanly(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    params = {"watch": "true", "resourceVersion": "0"}
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        await asyncio.sleep(0.05)
        sim.close_watches()
        assert await read_to_end(resp) == []
    assert sim.watch_count == 1


# -- field selectors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("type=Warning", {"w1", "w2"}),
        ("type==Warning", {"w1", "w2"}),
        ("type!=Warning", {"n1"}),
        ("reason=BackOff,involvedObject.kind=Pod", {"w1"}),
        ("involvedObject.name=node-7", {"w2"}),
        ("source=kubelet", {"w1", "w2"}),
        ("source=default-scheduler", {"n1"}),  # source falls back to reportingComponent
        ("reportingComponent=default-scheduler", {"n1"}),
        ("metadata.name=w1,type!=Normal", {"w1"}),
        ("metadata.namespace=kube-system", set()),
        ("", {"w1", "w2", "n1"}),
    ],
)
async def test_field_selectors_filter_lists_and_watches(
    sim: SimApiServer, http: aiohttp.ClientSession, selector: str, expected: set[str]
) -> None:
    start = sim.resource_version
    sim.create_event(event("w1"))
    sim.create_event(
        event("w2", reason="OOMKilling", involvedObject={"kind": "Node", "name": "node-7"})
    )
    sim.create_event(
        event(
            "n1",
            type="Normal",
            reason="Scheduled",
            source={},
            reportingComponent="default-scheduler",
        )
    )
    status, page = await get(http, f"{sim.url}/api/v1/events", fieldSelector=selector)
    assert status == 200
    assert {item["metadata"]["name"] for item in page["items"]} == expected
    params = {"watch": "1", "resourceVersion": str(start), "fieldSelector": selector}
    params["allowWatchBookmarks"] = "true"
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        lines = await read_until_bookmark(resp)
    assert {line["object"]["metadata"]["name"] for line in lines} == expected


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("foo=bar", "field label not supported: foo"),
        ("reason in (BackOff,Failed)", "invalid selector"),
        ("reason", "invalid selector"),
    ],
)
async def test_bad_field_selector_is_400(
    sim: SimApiServer, http: aiohttp.ClientSession, selector: str, message: str
) -> None:
    for params in ({}, {"watch": "true"}):
        status, body = await get(http, f"{sim.url}/api/v1/events", fieldSelector=selector, **params)
        assert (status, body["kind"], body["reason"]) == (400, "Status", "BadRequest")
        assert body["message"].startswith(message)


async def test_update_that_stops_matching_is_a_deleted_for_a_selecting_watch(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    params = {"watch": "true", "resourceVersion": str(sim.resource_version)}
    params["fieldSelector"] = "reason=BackOff"
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        sim.create_event(event("a"))
        sim.update_event("default", "a", {"reason": "Started", "type": "Normal"})
        lines = await read_lines(resp, 2)
    assert [line["type"] for line in lines] == ["ADDED", "DELETED"]
    assert rv(lines[1]["object"]) == sim.resource_version


# -- TTL and auth ------------------------------------------------------------------------------


async def test_event_ttl_deletes_with_a_new_revision_and_updates_renew(
    http: aiohttp.ClientSession,
) -> None:
    sim = SimApiServer(event_ttl=0.4)
    await sim.start()
    try:
        start = sim.resource_version
        params = {"watch": "true", "resourceVersion": str(start)}
        async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
            sim.create_event(event("short"))
            sim.create_event(event("renewed"))
            await asyncio.sleep(0.25)
            sim.bump_count("default", "renewed")
            lines = await read_lines(resp, 4, within=2.0)
            assert sim.get_event("default", "renewed") is not None
            lines += await read_lines(resp, 1, within=2.0)
    finally:
        await sim.stop()
    got = [(line["type"], line["object"]["metadata"]["name"]) for line in lines]
    assert got == [
        ("ADDED", "short"),
        ("ADDED", "renewed"),
        ("MODIFIED", "renewed"),
        ("DELETED", "short"),
        ("DELETED", "renewed"),
    ]
    assert [rv(line["object"]) for line in lines] == list(range(start + 1, start + 6))
    assert sim.get_event("default", "short") is None


async def test_requests_need_a_current_bearer_token(http: aiohttp.ClientSession) -> None:
    sim = SimApiServer(tokens={"old"})
    await sim.start()
    try:
        url = f"{sim.url}/api/v1/events"
        async with http.get(url) as resp:
            body = await resp.json()
            assert (resp.status, body["reason"], body["code"]) == (401, "Unauthorized", 401)
        async with http.get(url, headers={"Authorization": "Bearer old"}) as resp:
            assert resp.status == 200
        sim.tokens = {"new"}
        async with http.get(url, headers={"Authorization": "Bearer old"}) as resp:
            assert resp.status == 401
        async with http.get(url, headers={"Authorization": "Bearer new"}) as resp:
            assert resp.status == 200
    finally:
        await sim.stop()
    assert [r.status for r in sim.requests] == [401, 200, 401, 200]


async def test_namespace_version_and_unknown_paths(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    status, ns = await get(http, f"{sim.url}/api/v1/namespaces/kube-system")
    assert (status, ns["kind"], ns["metadata"]["uid"]) == (200, "Namespace", sim.kube_system_uid)
    status, other = await get(http, f"{sim.url}/api/v1/namespaces/payments")
    assert other["metadata"]["name"] == "payments"
    assert other["metadata"]["uid"] != sim.kube_system_uid
    status, version = await get(http, f"{sim.url}/version")
    assert (version["major"], version["minor"], version["gitVersion"]) == ("1", "36", "v1.36.0-sim")
    status, body = await get(http, f"{sim.url}/api/v1/pods")
    assert (status, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    async with http.get(f"{sim.url}/healthz") as resp:
        assert (resp.status, await resp.text()) == (200, "ok")


# -- faults ------------------------------------------------------------------------------------


async def test_status_next_answers_the_next_requests_with_those_statuses(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.faults.status_next = [(429, {"Retry-After": "3"}), (503, {})]
    url = f"{sim.url}/api/v1/events"
    async with http.get(url) as resp:
        body = await resp.json()
        assert (resp.status, resp.headers["Retry-After"]) == (429, "3")
        assert (body["reason"], body["code"]) == ("TooManyRequests", 429)
    async with http.get(url, params={"watch": "true"}) as resp:
        assert resp.status == 503
    async with http.get(url) as resp:
        assert resp.status == 200
    assert sim.faults.injected["status_429"] == sim.faults.injected["status_503"] == 1


async def test_reset_next_aborts_the_connection(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    # aiohttp's client silently retries an idempotent request once on a dropped connection,
    # so two resets are needed for the caller to see one.
    sim.faults.reset_next = 2
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.get(f"{sim.url}/api/v1/events") as resp:
            await resp.read()
    async with http.get(f"{sim.url}/api/v1/events") as resp:
        assert resp.status == 200
    assert sim.faults.injected["reset"] == 2
    assert [r.status for r in sim.requests] == [0, 0, 200]


async def test_drop_watches_after_ends_the_stream_cleanly(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    add(sim, 10)
    sim.faults.drop_watches_after = 3
    async with http.get(f"{sim.url}/api/v1/events", params={"watch": "true"}) as resp:
        lines = await read_to_end(resp)
    assert len(lines) == 3
    assert sim.faults.injected["drop_watch"] == 1


async def test_reset_watches_after_cuts_the_stream_mid_body(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    add(sim, 10)
    sim.faults.reset_watches_after = 4
    lines: list[bytes] = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async with http.get(f"{sim.url}/api/v1/events", params={"watch": "true"}) as resp:
            async with asyncio.timeout(3):
                while line := await resp.content.readline():
                    lines.append(line)
    assert len(lines) == 4
    assert sim.faults.injected["reset_watch"] == 1


async def test_malformed_lines_are_interleaved_and_real_events_all_arrive(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    created = add(sim, 9)
    sim.faults.malformed_every = 2
    params = {"watch": "true", "timeoutSeconds": "1"}
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        raw = await read_to_end(resp)
    good: list[bytes] = []
    bad: list[bytes] = []
    for line in raw:
        try:
            parsed = msgspec.json.decode(line)
        except msgspec.DecodeError:
            bad.append(line)
            continue
        (good if parsed.get("type") == "ADDED" else bad).append(line)
    assert len(bad) == 4 == sim.faults.injected["malformed"]
    names = {msgspec.json.decode(g)["object"]["metadata"]["name"] for g in good}
    assert names == {obj["metadata"]["name"] for obj in created}
    assert b'{"type":"WEIRD","object":{}}\n' in bad


async def test_split_lines_cut_lines_across_chunks_without_losing_bytes(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    created = add(sim, 30)
    sim.faults.split_lines = True
    params = {"watch": "true", "timeoutSeconds": "1"}
    chunks: list[bytes] = []
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        async with asyncio.timeout(3):
            async for chunk, _ in resp.content.iter_chunks():
                chunks.append(chunk)
    body = b"".join(chunks)
    lines = [msgspec.json.decode(line) for line in body.splitlines()]
    assert len(lines) == 30
    assert {line["object"]["metadata"]["uid"] for line in lines} == {
        obj["metadata"]["uid"] for obj in created
    }
    assert any(not chunk.endswith(b"\n") for chunk in chunks)
    assert len(chunks) > 5
    assert sim.faults.injected["split_chunk"] > 5


async def test_stalled_watch_sends_nothing_until_unstalled(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.faults.stall_watches = True
    params = {"watch": "true", "resourceVersion": "0", "allowWatchBookmarks": "true"}
    add(sim, 2)
    async with http.get(f"{sim.url}/api/v1/events", params=params) as resp:
        assert resp.status == 200
        with pytest.raises(TimeoutError):
            await read_lines(resp, 1, within=0.5)
        sim.faults.stall_watches = False
        lines = await read_lines(resp, 2)
    assert [line["type"] for line in lines] == ["ADDED", "ADDED"]


async def test_refused_connections_then_accepted_on_the_same_port(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    url = f"{sim.url}/api/v1/events"
    async with http.get(url, params={"watch": "true", "resourceVersion": "0"}) as watch:
        await asyncio.sleep(0.05)
        await sim.refuse_connections()
        with pytest.raises(aiohttp.ClientPayloadError):
            await read_to_end(watch)
    with pytest.raises(aiohttp.ClientConnectorError):
        async with http.get(url):
            pass
    await sim.accept_connections()
    async with http.get(url) as resp:
        assert resp.status == 200
    assert sim.url.endswith(f":{sim.port}")


async def test_serves_https_with_a_given_ssl_context() -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    sim = SimApiServer(ssl_context=server_ctx)
    await sim.start()
    try:
        assert sim.url.startswith("https://127.0.0.1:")
        async with aiohttp.ClientSession() as http:
            status, page = await get_tls(http, f"{sim.url}/api/v1/events", client_ctx)
        # aiohttp closes TLS transports a moment after the session (its documented
        # graceful-shutdown pause); without it the transport is collected unclosed.
        await asyncio.sleep(0.25)
    finally:
        await sim.stop()
    assert (status, page["kind"]) == (200, "EventList")


async def get_tls(http: aiohttp.ClientSession, url: str, ctx: Any) -> tuple[int, Obj]:
    async with http.get(url, ssl=ctx) as resp:
        return resp.status, await resp.json()


async def test_periodic_compaction_keeps_one_interval_of_history() -> None:
    sim = SimApiServer(compaction_interval=0.2)
    ticks: list[int] = []  # what each tick compacted to, whatever the machine's speed
    compact = sim.compact

    def recorded(revision: int | None = None) -> None:
        ticks.append(sim.resource_version if revision is None else revision)
        compact(revision)

    sim.compact = recorded  # type: ignore[method-assign]
    await sim.start()
    try:
        add(sim, 3)
        before = sim.resource_version
        await eventually(lambda: len(ticks) >= 2)
        # the first tick compacts to the revision at start (1), the second to what the first saw
        assert ticks[:2] == [1, before]
        assert sim.compacted == before
    finally:
        await sim.stop()
