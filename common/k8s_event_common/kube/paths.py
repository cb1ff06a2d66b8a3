"""API paths from segments that are checked, then escaped: a namespace must be a DNS-1123 label,
a name a DNS-1123 subdomain, an apiVersion ``[group/]version``, a resource (plural) a lower-case
word; anything else (``..``, a ``/``, a ``%``, an empty or over-long segment, not a string) is
``Invalid`` and nothing is sent. Each segment is percent-escaped all the same.

Segments come from messages and from answers (an ownerReference, an Event's involvedObject), so
none is trusted: a name such as ``../../secrets/x`` would otherwise reach another resource.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from k8s_event_common.kube.errors import Invalid

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_API_VERSION = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+((alpha|beta)[0-9]+)?")
_PLURAL = re.compile(r"[a-z][a-z0-9]*")


def namespace_problem(value: object) -> str | None:
    """Why ``value`` is not a namespace name (a DNS-1123 label), or None."""
    if not isinstance(value, str) or len(value) > 63 or not _LABEL.fullmatch(value):
        return f"namespace {value!r:.80} is not a DNS-1123 label"
    return None


def name_problem(value: object) -> str | None:
    """Why ``value`` is not an object's name (a DNS-1123 subdomain), or None."""
    if not isinstance(value, str) or len(value) > 253 or not _SUBDOMAIN.fullmatch(value):
        return f"name {value!r:.80} is not a DNS-1123 subdomain"
    return None


def api_version_problem(value: object) -> str | None:
    """Why ``value`` is not an apiVersion (``v1``, ``apps/v1``, ``batch/v1beta1``), or None."""
    if not isinstance(value, str) or len(value) > 317 or not _API_VERSION.fullmatch(value):
        return f"apiVersion {value!r:.80} is not [group/]version"
    return None


def plural_problem(value: object) -> str | None:
    """Why ``value`` is not a resource's path segment (``pods``, ``replicasets``), or None."""
    if not isinstance(value, str) or len(value) > 63 or not _PLURAL.fullmatch(value):
        return f"resource {value!r:.80} is not a lower-case word"
    return None


def object_path(api_version: str, plural: str, namespace: str | None, name: str = "") -> str:
    """``/api/v1/namespaces/shop/pods/web``: the path of a namespaced object (``name``), or of
    its collection (no name); ``namespace`` None for a cluster-scoped resource, or for a
    namespaced resource's collection across all namespaces (``/api/v1/events``: no name then).
    Raises ``Invalid`` naming the first segment that is not a Kubernetes name."""
    problem = (
        api_version_problem(api_version)
        or plural_problem(plural)
        or (namespace_problem(namespace) if namespace is not None else None)
        or (name_problem(name) if name else None)
    )
    if problem:
        raise Invalid(problem)
    path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace is not None:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{quote(plural, safe='')}"
    return path + (f"/{quote(name, safe='')}" if name else "")
