"""Writes core/v1 Events through a real kube-apiserver the way client-go's recorder does:
create, then on a repeat a merge PATCH bumping ``count`` and ``lastTimestamp``. Records the
id (``<uid>/<resourceVersion>``) of every version it makes."""

from __future__ import annotations

import asyncio
import random
import ssl
from datetime import UTC, datetime
from typing import Any

import aiohttp

REASONS = [
    ("BackOff", "Warning", "Back-off restarting failed container app in pod {name}"),
    ("Unhealthy", "Warning", "Readiness probe failed: HTTP probe failed with statuscode: 503"),
    ("FailedScheduling", "Warning", "0/3 nodes are available: 3 Insufficient memory."),
    ("Pulled", "Normal", 'Successfully pulled image "app:1.2.3" in 1.2s'),
    ("Started", "Normal", "Started container app"),
]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiWriter:
    def __init__(self, url: str, ssl_context: ssl.SSLContext, namespace: str, seed: int = 1):
        self.url = url
        self.ssl = ssl_context
        self.namespace = namespace
        self.rng = random.Random(seed)
        self.ids: list[str] = []
        self.latest: dict[str, str] = {}  # uid -> newest id
        self.names: list[str] = []
        self.counts: dict[str, int] = {}
        self.reasons: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None
        self.n = 0

    async def __aenter__(self) -> ApiWriter:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl),
            timeout=aiohttp.ClientTimeout(total=10),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._session is not None
        await self._session.close()
        await asyncio.sleep(0.25)  # let aiohttp close its TLS transports

    def retarget(self, url: str) -> None:
        """Write through another apiserver of the same etcd."""
        self.url = url

    def _record(self, obj: dict[str, Any]) -> dict[str, Any]:
        m = obj["metadata"]
        mid = f"{m['uid']}/{m['resourceVersion']}"
        self.ids.append(mid)
        self.latest[m["uid"]] = mid
        return obj

    async def ensure_namespace(self) -> None:
        assert self._session is not None
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        async with self._session.post(f"{self.url}/api/v1/namespaces", json=body) as r:
            assert r.status in (201, 409), await r.text()

    async def create(self, reason: str | None = None, type_: str | None = None) -> dict[str, Any]:
        assert self._session is not None
        self.n += 1
        pick = self.rng.choice(REASONS)
        reason = reason or pick[0]
        type_ = type_ or pick[1]
        pod = f"app-{self.rng.randrange(16**8):08x}-{self.n}"
        name = f"{pod}.{self.rng.randrange(16**16):016x}"
        now = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": self.namespace},
            "involvedObject": {
                "kind": "Pod",
                "namespace": self.namespace,
                "name": pod,
                "apiVersion": "v1",
                "fieldPath": "spec.containers{app}",
            },
            "reason": reason,
            "message": pick[2].format(name=pod),
            "type": type_,
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": "node-1",
        }
        async with self._session.post(
            f"{self.url}/api/v1/namespaces/{self.namespace}/events", json=body
        ) as r:
            text = await r.text()
            assert r.status == 201, text
            obj: dict[str, Any] = await r.json()
        self.names.append(name)
        self.counts[name] = 1
        self.reasons[name] = reason
        return self._record(obj)

    async def bump(self, name: str | None = None) -> dict[str, Any]:
        """What the recorder does on a repeat: PATCH count+1 and lastTimestamp."""
        assert self._session is not None
        name = name or self.rng.choice(self.names[-30:])
        self.counts[name] += 1
        patch = {"count": self.counts[name], "lastTimestamp": _now()}
        async with self._session.patch(
            f"{self.url}/api/v1/namespaces/{self.namespace}/events/{name}",
            data=__import__("json").dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
        ) as r:
            text = await r.text()
            assert r.status == 200, text
            obj: dict[str, Any] = await r.json()
        return self._record(obj)

    async def delete(self, name: str) -> None:
        """Delete one Event, as namespace deletion or a person with kubectl does."""
        assert self._session is not None
        url = f"{self.url}/api/v1/namespaces/{self.namespace}/events/{name}"
        async with self._session.delete(url) as r:
            assert r.status == 200, await r.text()

    async def write(
        self,
        n: int,
        *,
        rate: float = 50.0,
        bump_ratio: float = 0.3,
        reason: str | None = None,
        type_: str | None = None,
    ) -> None:
        for _ in range(n):
            if self.names and self.rng.random() < bump_ratio:
                await self.bump()
            else:
                await self.create(reason, type_)
            await asyncio.sleep(1 / rate)
