"""The worker's Kubernetes boundary: read a Pod and its controllers (which ones, the owner walk
``k8s_event_common.owners`` says), delete a Pod (uid precondition), annotate an object, write an
Event; dry-run on request.

The connection is the one the bridge uses too (``k8s_event_common.kube``): credentials (a
kubeconfig, or in a Pod its service account, loaded again on a 401 and the request asked once
more), the request (its body read as bytes, never logged), and every failure mapped once to
the shared tree. The worker sorts that tree by what it does next:
``Unavailable`` (refused, reset, timed out, 5xx, 408, 429: the API server is down or
overloaded; the worker holds the message), ``NotFound`` (404), ``Conflict`` (409: it exists
already, or a precondition no longer holds), ``Refused`` (any other answer: 401, 403, 422 ...;
not worth holding for).

Every path segment comes from a message or from an answer, so none is trusted: a namespace must
be a DNS-1123 label, a name a DNS-1123 subdomain, an apiVersion ``[group/]version``, else
``Invalid`` (nothing is sent); each is escaped all the same (``k8s_event_common.kube.paths``).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from k8s_event_common.kube.connection import Connection
from k8s_event_common.kube.errors import (
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    Refused,
    Unavailable,
)
from k8s_event_common.kube.paths import name_problem, namespace_problem, object_path
from k8s_event_common.owners import CLAIMS, KINDS
from k8s_event_consumer.remediation.settings import KubernetesSettings

__all__ = [
    "Conflict",
    "Invalid",
    "Kube",
    "KubeError",
    "NotFound",
    "Refused",
    "Unavailable",
    "name_problem",
    "namespace_problem",
]

# the kinds the worker reads or writes: a Pod, an Event, and the owners the one owner walk may
# prove (``k8s_event_common.owners``: one table of kinds for both programs)
_PLURALS = {"Event": "events"} | {kind: KINDS[kind].resource for kind in ("Pod", *sorted(CLAIMS))}


def _path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """An object's path (``name``), or its collection's (None: only to create in it). An empty
    name is ``Invalid``: it would be the collection's path, and a DELETE of it every Pod's."""
    plural = _PLURALS.get(kind)
    if plural is None:
        raise Refused(f"kind {kind!r:.80} is not one the worker knows")
    if name is not None and not name:
        raise Invalid(f"an empty {kind} name")
    return object_path(api_version, plural, namespace or "", name or "")  # never cluster-scoped


class Kube:
    def __init__(self, settings: KubernetesSettings) -> None:
        self.settings = settings
        self.connection = Connection(
            kubeconfig=settings.kubeconfig,
            context=settings.context,
            timeout=aiohttp.ClientTimeout(total=settings.request_timeout),
            reload_on_401=True,  # a service-account token rotates
            logger="k8s_event_consumer.remediation",
        )

    async def connect(self) -> None:
        """Raises ``KubeConfigError`` (a kubeconfig that can not be used)."""
        await self.connection.connect()

    async def close(self) -> None:
        await self.connection.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """The answer's JSON object; raises one of the shared tree's errors."""
        return await self.connection.request(
            method, path, query=query, body=body, content_type=content_type
        )

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("GET", _path(api_version, kind, namespace, name))

    async def delete_pod(self, namespace: str, name: str, uid: str, dry_run: bool) -> None:
        """Delete exactly that Pod (uid precondition: a new Pod of the same name is left)."""
        body: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"uid": uid},
        }
        if dry_run:
            # in the body: with a DeleteOptions body the API server ignores the query's dryRun
            # (and would delete for real)
            body["dryRun"] = ["All"]
        await self.request("DELETE", _path("v1", "Pod", namespace, name), body=body)

    async def annotate(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        annotations: dict[str, str],
        dry_run: bool,
    ) -> None:
        """Merge the annotations in (the same again changes nothing): only if ``uid`` is
        still the object's."""
        body = {"metadata": {"uid": uid, "annotations": annotations}}
        query = [("dryRun", "All")] if dry_run else []
        try:
            await self.request(
                "PATCH",
                _path(api_version, kind, namespace, name),
                body=body,
                query=query,
                content_type="application/merge-patch+json",
            )
        except Refused as exc:
            # another object of that name now: its uid can not be patched (422 "immutable")
            if "metadata.uid" in str(exc):
                raise Conflict(str(exc)) from exc
            raise

    async def event_exists(self, namespace: str, name: str) -> bool:
        try:
            await self.get("v1", "Event", namespace, name)
        except NotFound:
            return False
        return True

    async def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self.request("POST", _path("v1", "Event", namespace), body=event)
