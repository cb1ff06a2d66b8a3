"""Writes the workload's Events (k8s_event_sim.workload, the Events every tier writes) through a
real kube-apiserver the way client-go's recorder does: create, then on a repeat a merge PATCH
(``repeat_patch``: ``count`` + 1 and ``lastTimestamp``). Only where they are written differs
from the simulated API server: over HTTPS, into one namespace, so only the namespaced kind
the tests read (the kubelet's Pod Events, core/v1 style) is drawn, and ``managedFields`` is
left to the server. Records the id (``<uid>/<resourceVersion>``) of every version it makes."""

from __future__ import annotations

import asyncio
import json
import ssl
from datetime import UTC, datetime
from typing import Any

import aiohttp

from k8s_event_sim.apiserver import repeat_patch
from tests.support import Workload


class ApiWriter:
    def __init__(self, url: str, ssl_context: ssl.SSLContext, namespace: str, seed: int = 1):
        self.url = url
        self.ssl = ssl_context
        self.namespace = namespace
        self.events = Workload(
            seed=seed, kinds=("Pod",), style="core", now=lambda: datetime.now(UTC), recent=30
        )
        self.names: list[str] = []
        self.counts: dict[str, int] = {}  # name -> versions written
        self.reasons: dict[str, str] = {}
        self.types: dict[str, str] = {}
        self.current: dict[str, dict[str, Any]] = {}  # name -> newest version
        self._session: aiohttp.ClientSession | None = None

    @property
    def ids(self) -> list[str]:
        """The id of every version written, in order."""
        return self.events.ids

    @property
    def latest(self) -> dict[str, str]:
        """uid -> the id of its newest version."""
        return self.events.latest

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

    async def ensure_namespace(self) -> None:
        assert self._session is not None
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        async with self._session.post(f"{self.url}/api/v1/namespaces", json=body) as r:
            assert r.status in (201, 409), await r.text()

    async def create(self, reason: str | None = None, type_: str | None = None) -> dict[str, Any]:
        """A new Event of the workload (``reason``, ``type_`` replace its own)."""
        assert self._session is not None
        body = self.events.draw_event(self.namespace)
        body["metadata"].pop("managedFields", None)  # the server keeps its own
        if reason:
            body["reason"] = reason
        if type_:
            body["type"] = type_
        async with self._session.post(
            f"{self.url}/api/v1/namespaces/{self.namespace}/events", json=body
        ) as r:
            text = await r.text()
            assert r.status == 201, text
            obj: dict[str, Any] = await r.json()
        name = obj["metadata"]["name"]
        self.names.append(name)
        self.counts[name] = 1
        self.reasons[name] = obj["reason"]
        self.types[name] = obj["type"]
        self.current[name] = obj
        return self.events.record(obj, created=True)

    async def bump(self, name: str | None = None) -> dict[str, Any]:
        """What the recorder does on a repeat (by default of a recent Event)."""
        assert self._session is not None
        if name is None:
            _, name = self.events.rng.choice(self.events.recent)
        async with self._session.patch(
            f"{self.url}/api/v1/namespaces/{self.namespace}/events/{name}",
            data=json.dumps(repeat_patch(self.current[name])),
            headers={"Content-Type": "application/merge-patch+json"},
        ) as r:
            text = await r.text()
            assert r.status == 200, text
            obj: dict[str, Any] = await r.json()
        self.counts[name] += 1
        self.current[name] = obj
        return self.events.record(obj, created=False)

    async def delete(self, name: str) -> None:
        """Delete one Event, as namespace deletion or a person with kubectl does."""
        assert self._session is not None
        url = f"{self.url}/api/v1/namespaces/{self.namespace}/events/{name}"
        async with self._session.delete(url) as r:
            assert r.status == 200, await r.text()
        self.events.forget(self.namespace, name)

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
            repeat = self.events.draw_repeat(bump_ratio)
            if repeat is not None:
                await self.bump(repeat[1])
            else:
                await self.create(reason, type_)
            await asyncio.sleep(1 / rate)
