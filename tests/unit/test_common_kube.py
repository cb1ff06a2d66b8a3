"""k8s_event_common.kube: the one Kubernetes boundary of the bridge and the remediation worker.
Statuses and foreign failures mapped to one tree, paths refused before anything is sent,
credentials loaded again on a 401, no response body logged; and both programs on it."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from k8s_event_common.kube import errors
from k8s_event_common.kube.connection import Connection
from k8s_event_common.kube.paths import object_path

SECRET = "hunter2-in-a-pod-env"


def kubeconfig(path: Path, server: str, token: str = "t") -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return str(path)


def connection(config: str, **kw: Any) -> Connection:
    return Connection(kubeconfig=config, context=None, timeout=aiohttp.ClientTimeout(total=5), **kw)


async def serve(routes: list[web.RouteDef]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "status": "Failure", "code": code, "reason": reason,
            "message": message}  # fmt: skip


# -- the error tree ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "cls", "group"),
    [
        (400, errors.KubeBadRequest, errors.Refused),
        (401, errors.Unauthorized, errors.Refused),
        (403, errors.Forbidden, errors.Refused),
        (404, errors.NotFound, errors.KubeError),
        (408, errors.KubeUnavailable, errors.Unavailable),
        (409, errors.Conflict, errors.KubeError),
        (410, errors.ResourceExpired, errors.Refused),
        (422, errors.KubeBadRequest, errors.Refused),
        (429, errors.TooManyRequests, errors.Unavailable),
        (500, errors.KubeUnavailable, errors.Unavailable),
        (503, errors.KubeUnavailable, errors.Unavailable),
    ],
)
def test_each_status_is_one_error_of_the_tree_with_the_status_objects_words(
    code: int, cls: type[errors.KubeError], group: type[errors.KubeError]
) -> None:
    body = json.dumps(status(code, "Because", 'pods "web" is forbidden')).encode()
    exc = errors.error_for_status(code, {}, body)
    assert type(exc) is cls and isinstance(exc, group)
    assert exc.status == code
    assert str(exc) == f'{code} Because: pods "web" is forbidden'


def test_of_a_body_that_is_no_status_only_its_start_is_kept() -> None:
    page = b"<html>" + b"x" * 1000 + SECRET.encode()
    exc = errors.error_for_status(502, {}, page)
    assert isinstance(exc, errors.KubeUnavailable)
    assert str(exc).startswith("502 : <html>xxx") and SECRET not in str(exc)
    assert str(errors.error_for_status(503, {}, b"")) == "503 : HTTP 503"
    assert str(errors.error_for_status(500, {}, b"\xff\xfe")).startswith("500 : ")


def test_only_a_status_objects_message_and_reason_are_kept() -> None:
    body = json.dumps(status(422, "Invalid", "bad") | {"details": SECRET}).encode()
    assert SECRET not in str(errors.error_for_status(422, {}, body))


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), ("0.5", 0.5), ("-3", 0.0), ("inf", None), ("nan", None), ("", None),
     ("Wed, 21 Oct 2026 07:28:00 GMT", None)],
)  # fmt: skip
def test_retry_after_is_kept_on_every_passing_answer(header: str, seconds: float | None) -> None:
    for code in (429, 503):
        exc = errors.error_for_status(code, {"Retry-After": header}, b"")
        assert isinstance(exc, errors.Unavailable) and exc.retry_after == seconds


# -- paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "plural", "namespace", "name", "what"),
    [
        ("v1", "pods", "..", "web", "namespace"),
        ("v1", "pods", "shop", "..", "name"),
        ("v1", "pods", "shop", "../../secrets/x", "name"),
        ("v1", "pods", "shop/x", "web", "namespace"),
        ("v1", "pods", "shop", "web/exec", "name"),
        ("v1", "pods", "shop", "web%2Fexec", "name"),
        ("v1", "pods", "sh%6Fp", "web", "namespace"),
        ("v1", "pods", "shop", "Web", "name"),
        ("v1", "pods", "shop", "web?x=1", "name"),
        ("v1", "pods", "", "web", "namespace"),
        ("v1", "pods", "a.b", "web", "namespace"),  # a label: no dots
        ("v1", "pods", "x" * 64, "web", "namespace"),
        ("v1", "pods", "shop", "x" * 254, "name"),
        ("v1", "pods", "shop", 7, "name"),
        ("../v1", "pods", "shop", "web", "apiVersion"),
        ("apps/v1/..", "pods", "shop", "web", "apiVersion"),
        ("apps//v1", "pods", "shop", "web", "apiVersion"),
        ("V1", "pods", "shop", "web", "apiVersion"),
        ("apps", "pods", "shop", "web", "apiVersion"),
        ("", "pods", "shop", "web", "apiVersion"),
        (None, "pods", "shop", "web", "apiVersion"),
        ("v1", "../secrets", "shop", "web", "resource"),
        ("v1", "pods/exec", "shop", "web", "resource"),
    ],
)
def test_a_segment_that_is_not_a_kubernetes_name_is_invalid(
    api_version: Any, plural: str, namespace: str, name: Any, what: str
) -> None:
    with pytest.raises(errors.Invalid, match=what):
        object_path(api_version, plural, namespace, name)


def test_paths_of_objects_collections_and_cluster_scoped_resources() -> None:
    assert object_path("v1", "pods", "shop", "web-1") == "/api/v1/namespaces/shop/pods/web-1"
    assert object_path("apps/v1", "deployments", "shop", "web.v2") == (
        "/apis/apps/v1/namespaces/shop/deployments/web.v2"
    )
    assert object_path("v1", "events", "shop") == "/api/v1/namespaces/shop/events"
    assert object_path("v1", "nodes", None, "n-1") == "/api/v1/nodes/n-1"
    assert object_path("batch/v1beta1", "cronjobs", "a", "b") == (
        "/apis/batch/v1beta1/namespaces/a/cronjobs/b"
    )


# -- the connection ---------------------------------------------------------------------------


async def test_a_rotated_token_is_loaded_again_on_a_401_and_the_request_asked_once_more(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server takes only the new token: the request with the old one is answered 401, the
    credentials are read again (the file now holds the new one) and the same request is sent
    once more. Without ``reload_on_401`` the 401 is the caller's (the bridge's watch loop)."""
    caplog.set_level(logging.INFO)
    seen: list[str] = []

    async def pod(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response(status(401, "Unauthorized", "Unauthorized"), status=401)
        return web.json_response({"metadata": {"name": "web"}})

    runner, url = await serve([web.get("/api/v1/namespaces/shop/pods/web", pod)])
    path = kubeconfig(tmp_path / "kubeconfig", url, token="old")
    strict, reloading = connection(path), connection(path, reload_on_401=True)
    await strict.connect()
    await reloading.connect()
    first = reloading.client
    try:
        kubeconfig(tmp_path / "kubeconfig", url, token="new")  # rotated
        reloading.loaded_at -= 2  # not just loaded (several callers' 401s reload once)
        with pytest.raises(errors.Unauthorized, match="401 Unauthorized"):
            await strict.request("GET", "/api/v1/namespaces/shop/pods/web")
        doc = await reloading.request("GET", "/api/v1/namespaces/shop/pods/web")
        assert doc == {"metadata": {"name": "web"}}
        assert seen == ["Bearer old", "Bearer old", "Bearer new"]
        [asked] = [r for r in caplog.records if r.getMessage() == "unauthorized_asked_again"]
        assert asked.fields["reloaded"] is True  # type: ignore[attr-defined]
        assert reloading.client is not first and reloading.retired[0][1] is first
    finally:
        await strict.close()
        await reloading.close()
        await runner.cleanup()
    assert first.rest_client.pool_manager.closed


async def test_a_401_that_a_reload_does_not_cure_is_unauthorized_asked_once_more_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    async def refuse(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.json_response(status(401, "Unauthorized", "Unauthorized"), status=401)

    runner, url = await serve([web.delete("/api/v1/namespaces/shop/pods/web", refuse)])
    conn = connection(kubeconfig(tmp_path / "kubeconfig", url), reload_on_401=True)
    await conn.connect()
    conn.loaded_at -= 2
    try:
        with pytest.raises(errors.Unauthorized):
            await conn.request("DELETE", "/api/v1/namespaces/shop/pods/web", body={})
        conn.loaded_at -= 2  # past RELOAD_COALESCE: the next 401 reloads again
        (tmp_path / "kubeconfig").write_text("not: [a kubeconfig")
        with pytest.raises(errors.Unauthorized) as refused:  # the reload failed: the 401
            await conn.request("DELETE", "/api/v1/namespaces/shop/pods/web", body={})
        assert isinstance(refused.value.__cause__, errors.KubeConfigError)
        [failed] = [r for r in caplog.records if r.getMessage() == "credentials_reload_failed"]
        assert "not valid YAML" in failed.fields["error"]  # type: ignore[attr-defined]
    finally:
        await conn.close()
        await runner.cleanup()
    assert seen == ["DELETE"] * 3  # the second 401 was not asked again: no new credentials


async def test_an_unusable_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(errors.KubeConfigError, match="kubernetes credentials"):
        await connection(str(bad)).connect()
    with pytest.raises(errors.KubeConfigError):
        await connection(str(tmp_path / "missing")).connect()
    bad.write_text(f"users: [{{name: u, user: {{token: {SECRET}}}}}\nclusters: [\n")
    with pytest.raises(errors.KubeConfigError, match=r"not valid YAML \(line \d+\)") as broken:
        await connection(str(bad)).connect()
    assert SECRET not in str(broken.value) and broken.value.__cause__ is None


async def test_foreign_failures_are_unavailable(tmp_path: Path) -> None:
    """Refused, timed out, a client closed under the request, an answer that is not JSON:
    each is ``KubeUnavailable`` (passing), never a library's exception."""
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>proxy</html>")

    runner, url = await serve([web.get("/hang", hang), web.get("/html", html)])
    conn = Connection(
        kubeconfig=kubeconfig(tmp_path / "kubeconfig", url),
        context=None,
        timeout=aiohttp.ClientTimeout(total=0.2),
    )
    refused = connection(kubeconfig(tmp_path / "refused", "http://127.0.0.1:1"))
    await conn.connect()
    await refused.connect()
    try:
        with pytest.raises(errors.KubeUnavailable, match="TimeoutError"):
            await conn.request("GET", "/hang")
        with pytest.raises(errors.KubeUnavailable, match="unparsable"):
            await conn.request("GET", "/html")
        with pytest.raises(errors.KubeUnavailable, match="ClientConnectorError"):
            await refused.request("GET", "/api/v1/namespaces/shop/pods/web")
        await conn.client.close()  # closed under the caller
        with pytest.raises(errors.KubeUnavailable):
            await conn.request("GET", "/html")
    finally:
        release.set()
        await conn.close()
        await refused.close()
        await runner.cleanup()


async def test_no_response_body_is_logged_even_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """kubernetes_asyncio logs every body it reads at debug level (a Pod's env values); the
    shared connection takes answers raw, so at debug level nothing of a body is logged: not of
    a Pod read, nor of a refusal. Run through the worker's own client."""
    from k8s_event_consumer.remediation.kube import Kube
    from k8s_event_consumer.remediation.settings import KubernetesSettings

    env = [{"name": "PASSWORD", "value": SECRET}]
    pod = {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u"},
        "spec": {"containers": [{"name": "app", "env": env}]},
    }

    async def get_pod(request: web.Request) -> web.Response:
        return web.json_response(pod)

    async def forbidden(request: web.Request) -> web.Response:
        refusal = status(403, "Forbidden", "no") | {"details": {"causes": [SECRET]}}
        return web.json_response(refusal, status=403)

    runner, url = await serve(
        [
            web.get("/api/v1/namespaces/shop/pods/web", get_pod),
            web.delete("/api/v1/namespaces/shop/pods/web", forbidden),
        ]
    )
    kube = Kube(
        KubernetesSettings(cluster="c", kubeconfig=kubeconfig(tmp_path / "kc", url))  # type: ignore[arg-type]
    )
    await kube.connect()
    caplog.set_level(logging.DEBUG)
    try:
        assert (await kube.get("v1", "Pod", "shop", "web"))["spec"] == pod["spec"]
        with pytest.raises(errors.Forbidden) as refused:
            await kube.delete_pod("shop", "web", "u", dry_run=False)
    finally:
        await kube.close()
        await runner.cleanup()
    assert SECRET not in str(refused.value)
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


# -- both programs on it ----------------------------------------------------------------------


def test_the_bridge_and_the_worker_share_one_connection_and_one_error_tree(
    tmp_path: Path,
) -> None:
    """Two clients that could drift apart are one: both hold the shared ``Connection``, and
    every error name either program catches is the same class (an ``except`` in one catches
    what the other's boundary raises)."""
    from bridge import errors as bridge_errors
    from bridge.kube.client import KubeClient
    from bridge.settings import KubernetesSettings as BridgeKube
    from k8s_event_consumer.remediation import kube as worker_kube
    from k8s_event_consumer.remediation.settings import KubernetesSettings as WorkerKube

    config = kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    bridge = KubeClient(BridgeKube(kubeconfig=config))
    worker = worker_kube.Kube(WorkerKube(cluster="c", kubeconfig=config))  # type: ignore[arg-type]
    assert type(bridge.connection) is Connection and type(worker.connection) is Connection
    for name in ("KubeError", "NotFound", "Conflict"):
        assert getattr(bridge_errors, name) is getattr(worker_kube, name) is getattr(errors, name)
    for name in ("ResourceExpired", "TooManyRequests", "Unauthorized", "Forbidden",
                 "KubeUnavailable", "KubeBadRequest", "from_status"):  # fmt: skip
        assert getattr(bridge_errors, name) is getattr(errors, name)
    for name in ("Invalid", "Unavailable", "Refused"):
        assert getattr(worker_kube, name) is getattr(errors, name)
    assert issubclass(bridge_errors.QuietWatch, errors.KubeError)
