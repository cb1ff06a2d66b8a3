"""The truth of a living cluster's Events and the check of a stream against it, shared by
test_living_cluster.py and demo_cluster.py.

:class:`Truth` is an independent raw watch on core/v1 Events of the whole cluster (not the
bridge's code): every version it saw. :func:`assert_stream_carries` checks that every version of
the kept reasons is in the stream exactly once with the CloudEvent attributes docs/design.md
documents, computed here from the Event itself (:func:`expected_attributes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import unquote

import aiohttp

from tests.cloudevent_expected import expected_attributes
from tests.integration.harness import stream_messages
from tests.standins.cluster import LivingCluster
from tests.support import eventually

# ----------------------------------------------------------------------------- the truth


class Truth:
    """Every version of every core/v1 Event in the cluster from now on, read by a raw watch
    (resumed from the last RV it saw if the server ends it)."""

    def __init__(self, cluster: LivingCluster) -> None:
        self.cluster = cluster
        self.versions: dict[str, dict[str, Any]] = {}  # "<uid>/<rv>" -> the Event
        self.lines: dict[str, bytes] = {}  # "<uid>/<rv>" -> the watch line as the server sent it
        self._task: asyncio.Task[None] | None = None
        self._rv = ""
        self.errors: list[str] = []

    async def __aenter__(self) -> Truth:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.cluster.ssl_context())
        )
        async with self._session.get(f"{self.cluster.url}/api/v1/events?limit=1") as r:
            assert r.status == 200, await r.text()
            self._rv = (await r.json())["metadata"]["resourceVersion"]
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._session.close()
        await asyncio.sleep(0.25)

    async def _watch(self) -> None:
        while True:
            url = (
                f"{self.cluster.url}/api/v1/events?watch=1&resourceVersion={self._rv}"
                "&timeoutSeconds=600"
            )
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as r:
                assert r.status == 200, await r.text()
                async for line in r.content:
                    ev = json.loads(line)
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        self.errors.append(json.dumps(obj))
                        raise AssertionError(f"the truth's watch failed: {obj}")
                    m = obj["metadata"]
                    self._rv = m["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self.versions[f"{m['uid']}/{m['resourceVersion']}"] = obj
                        self.lines[f"{m['uid']}/{m['resourceVersion']}"] = line

    def kept(self, reasons: set[str] | None) -> dict[str, dict[str, Any]]:
        """The versions with one of ``reasons`` (None: every version)."""
        return {
            i: e for i, e in self.versions.items() if reasons is None or e.get("reason") in reasons
        }

    def of(self, reason: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.versions.values()
            if e.get("reason") == reason
            and (namespace is None or e["metadata"]["namespace"] == namespace)
        ]


# ----------------------------------------------------------------------------- CloudEvents


def cloudevent(
    subject: str, headers: dict[str, str], body: bytes
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(attributes, data) of a message in either content mode; the NATS subject is added to
    the attributes as ``nats-subject``."""
    if "ce-id" in headers:
        attrs = {k[3:]: unquote(v) for k, v in headers.items() if k.startswith("ce-")}
        attrs["datacontenttype"] = headers.get("Content-Type", "")
        data = json.loads(body)
    else:
        assert headers.get("Content-Type") == "application/cloudevents+json", headers
        doc = json.loads(body)
        data = doc.pop("data")
        attrs = {k: str(v) for k, v in doc.items()}
    attrs["nats-subject"] = subject
    return attrs, data


async def stream_events(url: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [cloudevent(s, h, b) for s, h, b in await stream_messages(url) if "._bridge." not in s]


async def assert_stream_carries(
    url: str, truth: Truth, reasons: set[str] | None, timeout: float = 90
) -> dict[str, dict[str, Any]]:
    """Every version the truth saw with one of ``reasons`` (None: any) is in the stream once,
    with the documented attributes; nothing in the stream is there twice or has another
    reason. Returns the kept versions."""
    kept = truth.kept(reasons)
    assert kept, f"the cluster wrote no Event with a reason in {reasons}"

    async def all_there() -> bool:
        ids = {a["id"] for a, _ in await stream_events(url)}
        return set(kept) <= ids

    try:
        await eventually(all_there, timeout=timeout, interval=0.5)
    except AssertionError:
        ids = {a["id"] for a, _ in await stream_events(url)}
        missing = [(i, kept[i]["reason"]) for i in kept if i not in ids]
        raise AssertionError(f"{len(missing)} of {len(kept)} versions missing: {missing}") from None
    events = await stream_events(url)
    ids = [a["id"] for a, _ in events]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    assert not dups, f"in the stream more than once: {dups}"
    for attrs, data in events:
        if reasons is not None:
            assert attrs["k8sreason"] in reasons, f"the filter let {attrs['k8sreason']} through"
        ev = kept.get(attrs["id"])
        if ev is None:
            continue  # an Event the bridge listed at its start, before the truth began
        want = expected_attributes(ev)
        got = {k: attrs.get(k) for k in want}
        assert got == want, f"{attrs['id']} ({ev['reason']}): {got} != {want}"
        # data: the Event as the API returned it, without metadata.managedFields
        meta = {k: v for k, v in ev["metadata"].items() if k != "managedFields"}
        assert data == {**ev, "metadata": meta}, attrs["id"]
    return kept
