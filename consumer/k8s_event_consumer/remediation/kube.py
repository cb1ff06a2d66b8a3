"""The worker's Kubernetes boundary (kubernetes_asyncio): read a Pod and its controllers,
delete a Pod (uid precondition), annotate an object, write an Event; dry-run on request.

Failures are mapped once, here: ``Unavailable`` (refused, reset, timed out, 5xx, 429: the
API server is down or overloaded; the worker holds the message), ``NotFound`` (404),
``Conflict`` (409: it exists already, or a precondition no longer holds), ``Refused`` (any
other answer: 401, 403, 422 ...; not worth holding for).

Every path segment comes from a message or from an answer, so none is trusted: a namespace must
be a DNS-1123 label, a name a DNS-1123 subdomain, an apiVersion ``[group/]version``, else
``Invalid`` (nothing is sent); each is escaped all the same.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from k8s_event_consumer.remediation.settings import KubernetesSettings

# a controller kind → its API path segment (the kinds a Pod's owner chain may hold)
PLURALS = {
    "ReplicaSet": "replicasets",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "ReplicationController": "replicationcontrollers",
    "Job": "jobs",
    "CronJob": "cronjobs",
}


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_API_VERSION = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+((alpha|beta)[0-9]+)?")


class KubeError(Exception):
    pass


class Invalid(KubeError):
    """A path segment that is not a Kubernetes name: nothing was sent."""


class Unavailable(KubeError):
    """The API server did not answer, or answered 5xx/429: try again later."""


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Refused(KubeError):
    """An answer that asking again will not change (401, 403, 422, ...)."""


def namespace_problem(value: str) -> str | None:
    """Why ``value`` is not a namespace name (a DNS-1123 label), or None."""
    if not isinstance(value, str) or len(value) > 63 or not _LABEL.fullmatch(value):
        return f"namespace {value!r:.80} is not a DNS-1123 label"
    return None


def name_problem(value: str) -> str | None:
    """Why ``value`` is not an object's name (a DNS-1123 subdomain), or None."""
    if not isinstance(value, str) or len(value) > 253 or not _SUBDOMAIN.fullmatch(value):
        return f"name {value!r:.80} is not a DNS-1123 subdomain"
    return None


def _path(api_version: str, kind: str, namespace: str, name: str = "") -> str:
    plural = "pods" if kind == "Pod" else "events" if kind == "Event" else PLURALS.get(kind)
    if plural is None:
        raise Refused(f"kind {kind!r:.80} is not one the worker knows")
    if not isinstance(api_version, str) or not _API_VERSION.fullmatch(api_version):
        raise Invalid(f"apiVersion {api_version!r:.80} is not [group/]version")
    problem = namespace_problem(namespace) or (name_problem(name) if name else None)
    if problem:
        raise Invalid(problem)
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{quote(namespace, safe='')}/{plural}"
    return path + (f"/{quote(name, safe='')}" if name else "")


class Kube:
    def __init__(self, settings: KubernetesSettings) -> None:
        self.settings = settings
        self._client: Any = None
        self._timeout = aiohttp.ClientTimeout(total=settings.request_timeout)

    async def connect(self) -> None:
        cfg = k8s_client.Configuration()
        if self.settings.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=self.settings.kubeconfig or os.environ.get("KUBECONFIG"),
                context=self.settings.context,
                client_configuration=cfg,
                persist_config=False,
            )
        self._client = k8s_client.ApiClient(configuration=cfg)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        try:
            out = await self._client.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=self._timeout,
            )
        except ApiException as exc:
            status = int(exc.status or 0)
            reason = exc.reason.decode() if isinstance(exc.reason, bytes) else exc.reason
            what = f"{method} {path}: {status} {reason}"
            if status == 404:
                raise NotFound(what) from exc
            if status == 409:
                raise Conflict(what) from exc
            if status == 429 or status >= 500 or status == 0:
                raise Unavailable(what) from exc
            body = exc.body.decode() if isinstance(exc.body, bytes) else str(exc.body or "")
            raise Refused(f"{what}: {body[:300]}") from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return out if isinstance(out, dict) else {}

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("GET", _path(api_version, kind, namespace, name))

    async def top_controller(self, obj: dict[str, Any]) -> tuple[dict[str, Any], str, str] | None:
        """The object's controller, and its controller's, up to the top (a Pod → ReplicaSet →
        Deployment): (object, apiVersion, kind), or None when nothing controls it."""
        found: tuple[dict[str, Any], str, str] | None = None
        current = obj
        for _ in range(4):
            ref = next(
                (
                    r
                    for r in (current.get("metadata") or {}).get("ownerReferences") or []
                    if r.get("controller")
                ),
                None,
            )
            if ref is None or ref.get("kind") not in PLURALS:
                break
            namespace = (obj.get("metadata") or {}).get("namespace", "")
            current = await self.get(ref["apiVersion"], ref["kind"], namespace, ref["name"])
            if (current.get("metadata") or {}).get("uid") != ref.get("uid"):
                break  # replaced meanwhile: not the owner any more
            found = (current, ref["apiVersion"], ref["kind"])
        return found

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
