"""The one connection to the Kubernetes API server, for the bridge and the remediation worker:
credentials loaded (a kubeconfig, or in a Pod its service account) and loaded again when they
rotate, the request itself, and every failure mapped to the ``errors.KubeError`` tree.

kubernetes_asyncio (imported lean: ``k8s_event_common.kube.lean``) does TLS, auth and token
refresh and sends the request (``ApiClient.call_api``, as its generated API classes do). Its
answer is always taken raw (``_preload_content=False``): the status is checked here, the body
is read here and handed over as bytes; kubernetes_asyncio never reads a body, so it never
logs one (its debug log writes every preloaded body: a Pod's env values), and neither does
this module: of an error's body only the Status object's ``message`` and ``reason`` are kept.

A request's path is built by the caller from checked segments (``paths.object_path``): the
bridge and the remediation worker build every path so (``tests/unit/test_kube_paths_by_hand.py``
holds the bridge to it). ``path_params`` (quoted by ``call_api``) is kept for a caller's
constants; neither program passes any.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

import aiohttp
import yaml

from k8s_event_common.kube import errors
from k8s_event_common.kube.lean import client as k8s_client
from k8s_event_common.kube.lean import config as k8s_config
from k8s_event_common.kube.lean import incluster_config
from k8s_event_common.logformat import Logger

# What a request or a read of its body may raise besides a status. RuntimeError: a request
# that picked up a client closed meanwhile ("Session is closed").
FOREIGN = (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError)
# Several callers hit by one token rotation reload once, not once each.
RELOAD_COALESCE = 1.0
# A retired client's requests (a watch: at most its timeout) end before it is closed.
RETIRE_AFTER = 900.0


def in_cluster() -> bool:
    """Inside a Pod: the service host is set and the service-account token is mounted."""
    return bool(os.environ.get(incluster_config.SERVICE_HOST_ENV_NAME)) and os.path.isfile(
        incluster_config.SERVICE_TOKEN_FILENAME
    )


def pod_namespace() -> str | None:
    """The namespace of this Pod's service account (in a Pod), else None."""
    path = os.path.join(os.path.dirname(incluster_config.SERVICE_TOKEN_FILENAME), "namespace")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


class Connection:
    """An ``ApiClient`` from the credentials, replaced by ``reload_credentials()``.

    ``timeout`` bounds each request (kubernetes_asyncio's default is none at all);
    ``pool_size`` is the most requests at once (None: kubernetes_asyncio's default);
    ``keep_retired`` how many replaced clients stay open for the requests still on them (a
    watch streams through the client it started on), each at most ``RETIRE_AFTER`` seconds;
    ``reload_on_401`` makes a request answered 401 load the credentials again and ask once more
    (a caller with its own reload, the bridge's watch loop, leaves it off), logged on
    ``logger``; ``prepare`` is called with each new client.
    """

    def __init__(
        self,
        *,
        kubeconfig: str | None,
        context: str | None,
        timeout: aiohttp.ClientTimeout,
        pool_size: int | None = None,
        keep_retired: int = 1,
        reload_on_401: bool = False,
        prepare: Callable[[Any], None] | None = None,
        logger: str = "k8s_event_common.kube",
    ) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.timeout = timeout
        self.pool_size = pool_size
        self.keep_retired = max(1, keep_retired)
        self.reload_on_401 = reload_on_401
        self.prepare = prepare
        self.log = Logger(logger)
        self.client: Any = None  # the ApiClient requests go through now
        self.retired: list[tuple[float, Any]] = []  # (when, client): replaced, still open
        self.loaded_at = -RELOAD_COALESCE

    async def connect(self) -> None:
        """Load the credentials and open a client; raises ``KubeConfigError``."""
        cfg = k8s_client.Configuration()
        try:
            if self.kubeconfig is None and in_cluster():
                k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            else:
                await k8s_config.load_kube_config(
                    config_file=self.kubeconfig or os.environ.get("KUBECONFIG") or None,
                    context=self.context,
                    client_configuration=cfg,
                    persist_config=False,
                )
        except yaml.YAMLError as exc:
            # its text quotes the file's lines (a token, a key): only where it broke
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise errors.KubeConfigError(
                f"kubernetes credentials: the kubeconfig is not valid YAML{where}"
            ) from None
        except (k8s_config.ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            raise errors.KubeConfigError(f"kubernetes credentials: {exc}") from exc
        if self.pool_size is not None:
            cfg.connection_pool_maxsize = self.pool_size
        old = self.client
        self.client = k8s_client.ApiClient(configuration=cfg)
        if self.prepare is not None:
            self.prepare(self.client)
        now = asyncio.get_running_loop().time()
        self.loaded_at = now
        if old is not None:
            self.retired.append((now, old))  # requests may still be on it: close it later
        # A credential refused again and again reloads every back-off: without a bound,
        # RETIRE_AFTER of retired clients would be held (~30 KB each, ~840 KB with the
        # system's trust store). A request on a client closed here fails as passing.
        while self.retired and (
            now - self.retired[0][0] > RETIRE_AFTER or len(self.retired) > self.keep_retired
        ):
            await self.retired.pop(0)[1].close()

    async def reload_credentials(self) -> bool:
        """Read the kubeconfig or the service-account token again (they rotate); once for
        several callers that ask within ``RELOAD_COALESCE`` (False: another just did).
        Raises ``KubeConfigError``."""
        if asyncio.get_running_loop().time() - self.loaded_at < RELOAD_COALESCE:
            return False  # another caller just did
        await self.connect()
        return True

    async def close(self) -> None:
        for _, old in self.retired:
            await old.close()
        self.retired.clear()
        if self.client is not None:
            await self.client.close()
            self.client = None

    async def call(
        self,
        method: str,
        path: str,
        path_params: dict[str, str] | None = None,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """One request: JSON both ways (``body`` a JSON value), the bearer token (refreshed by
        kubernetes_asyncio) when there is one. A 2xx answer is returned unread (the caller
        reads and releases it); any other raises its ``KubeError``."""
        try:
            return await self._call(method, path, path_params, query, body, content_type)
        except errors.Unauthorized as first:
            if not self.reload_on_401:
                raise
            try:
                reloaded = await self.reload_credentials()
            except errors.KubeConfigError as exc:
                self.log.error("credentials_reload_failed", after="401", error=str(exc))
                raise first from exc  # the 401 is the answer
        self.log.info("unauthorized_asked_again", method=method, path=path, reloaded=reloaded)
        return await self._call(method, path, path_params, query, body, content_type)

    async def _call(
        self,
        method: str,
        path: str,
        path_params: dict[str, str] | None,
        query: list[tuple[str, Any]] | None,
        body: Any,
        content_type: str,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        if self.client is None:
            raise errors.KubeUnavailable(f"{method} {path}: not connected")
        try:
            resp: aiohttp.ClientResponse = await self.client.call_api(
                path,
                method,
                path_params or {},
                query or [],
                headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except k8s_config.ConfigException as exc:
            # e.g. the in-cluster token hook found the token file empty mid-rotation
            raise errors.Unauthorized(f"credentials: {exc}") from exc
        except FOREIGN as exc:
            raise errors.KubeUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if not 200 <= resp.status <= 299:
            try:
                data = await resp.read()
            except FOREIGN:
                data = b""
            finally:
                resp.release()
            raise errors.error_for_status(resp.status, resp.headers, data)
        return resp

    async def read(self, *args: Any, **params: Any) -> bytes:
        """``call``'s answer read whole: its body's bytes."""
        resp = await self.call(*args, **params)
        try:
            return await resp.read()
        except FOREIGN as exc:
            raise errors.KubeUnavailable(f"{type(exc).__name__}: {exc}") from exc
        finally:
            resp.release()

    async def request(self, *args: Any, **params: Any) -> dict[str, Any]:
        """``call``'s answer as a JSON object (``{}`` for an empty body); a body that is not
        JSON is ``KubeUnavailable`` (a proxy's page, not the API server)."""
        data = await self.read(*args, **params)
        if not data.strip():
            return {}
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise errors.KubeUnavailable(f"unparsable response: {data[:100]!r}") from exc
        if not isinstance(doc, dict):
            raise errors.KubeUnavailable("response is not a JSON object")
        return doc
