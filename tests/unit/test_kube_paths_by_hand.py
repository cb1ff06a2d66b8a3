"""No API path is written by hand in ``bridge/``: every one comes from
``k8s_event_common.kube.paths`` (its segments checked, then escaped; tests/unit/test_kube_paths.py
shows what that refuses). The package's string literals and f-strings are read for anything
that looks like an API path; the finder is shown to find each shape a hand-built path took or
might take, and to leave prose and other URIs alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from k8s_event_common import owners

ROOT = Path(__file__).resolve().parents[2]

# the collections the bridge reads or writes: an API path's first segment after a prefix
_COLLECTIONS = {"apis", "api", "namespaces", "events", "leases"} | {
    k.resource for k in owners.KINDS.values()
}
# a placeholder: ``{x}`` (an f-string's or .format's), ``%s``; one whose value is named as an
# API path or its prefix (``{k.prefix}``, ``{api_path}``) stands for the start of one
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}|%(?:\(([^)]*)\))?[sdr]")
_PATHLIKE = re.compile(r"(?i)(prefix|api_?path|resource_?path|api_?url)$")
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://[^/]*")
_API_PATH = re.compile(
    rf"^(?:\{{\}})*/(?:{'|'.join(sorted(_COLLECTIONS))})(?:/|$)|/apis?/|/namespaces/"
)


def _placeholder(name: str) -> str:
    return "/api" if _PATHLIKE.search(name.strip()) else "{}"


def _looks_like_a_path(text: str) -> bool:
    """Is this string (an f-string's placeholders as ``{name}``) an API path, or a piece of
    one that starts at a segment: ``/api/v1/events``, ``{prefix}/{resource}/{name}``,
    ``{base}/namespaces/{ns}/pods``, ``https://{host}/apis/...``, ``%s/leases/%s``. A URI of
    another scheme (``k8s://<cluster>/namespaces/<ns>``, the CloudEvent source) is not."""
    rendered = _PLACEHOLDER.sub(lambda m: _placeholder(m.group(1) or m.group(2) or ""), text)
    scheme = _SCHEME.match(rendered)
    if scheme is not None:
        if scheme.group(1) not in ("http", "https"):
            return False
        rendered = rendered[scheme.end() :]
    return bool(_API_PATH.search(rendered))


def hand_built_paths(source: str) -> list[tuple[int, str]]:
    """The string literals and f-strings of ``source`` that look like an API path, with their
    line; a docstring or any other bare string statement is prose, not sent."""
    tree = ast.parse(source)
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant | ast.JoinedStr)
    }
    parts = {
        id(value)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for value in node.values
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in prose or id(node) in parts:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(
                v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                for v in node.values
            )
        else:
            continue
        if _looks_like_a_path(text):
            found.append((node.lineno, text))
    return found


@pytest.mark.parametrize(
    "line",
    [
        # what the bridge had before every path came from k8s_event_common.kube.paths
        'NAMESPACE = "/api/v1/namespaces/{name}"',
        'LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"',
        'LEASE = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"',
        'path = "/api/v1/events"',
        'namespaced_path = "/api/v1/namespaces/{namespace}/events"',
        'p = f"{k.prefix}/namespaces/{namespace}/{k.resource}/{name}"',
        'p = f"{k.prefix}/{k.resource}/{name}"',
        # and what a new one might look like
        'p = "/apis/{}/{}/namespaces/{}/leases/{}".format(g, v, ns, n)',
        'p = "%s/leases/%s" % (prefix, name)',
        'p = prefix + "/namespaces/" + ns + "/pods/" + name',
        'p = f"/api/v1/nodes/{name}"',
        'url = f"https://{host}/api/v1/events?watch=1"',
    ],
)
def test_a_hand_built_api_path_is_found(line: str) -> None:
    assert hand_built_paths(line), line


@pytest.mark.parametrize(
    "line",
    [
        'source = f"k8s://{cluster}/namespaces/"',  # the CloudEvent source: a URI, not a path
        'ROUTES = ("/metrics", "/readyz", "/livez", "/status")',  # the bridge's own server
        'needs = "get on namespaces/kube-system (or set cluster.name)"',
        'api = "rbac.authorization.k8s.io/v1"',
        'def f():\n    """Reads /api/v1/namespaces/kube-system."""',
        'x: int = 1\n"""A setting\'s docstring naming /api/v1/events."""',
    ],
)
def test_prose_and_other_uris_are_not_paths(line: str) -> None:
    assert hand_built_paths(line) == []


def test_no_api_path_is_built_by_hand_in_the_bridge() -> None:
    """Every path the bridge sends comes from ``k8s_event_common.kube.paths`` (its segments
    checked, then escaped); a path written here would be sent unchecked."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted((ROOT / "bridge").rglob("*.py"))
        for line, text in hand_built_paths(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "build it with k8s_event_common.kube.paths:\n" + "\n".join(found)
