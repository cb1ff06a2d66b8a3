"""``log.level: debug`` is the programs' own debug, not the libraries': kubernetes_asyncio logs
every response body at debug (``response body: ...``: a Pod's env values, a Secret's data),
aiohttp and nats-py what crosses the wire. A real kubernetes_asyncio read of a Pod whose env
holds a secret, served by a local HTTP server, with each program's log setup at debug: the
secret is in no log line, and the program's own debug lines are."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from aiohttp import web

from bridge import logs as bridge_logs
from k8s_event_common import logformat
from k8s_event_consumer import logs as consumer_logs

SECRET = "Sentinel-PodEnv-Value-31c7"

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1"},
    "spec": {
        "containers": [
            {"name": "web", "image": "web:1", "env": [{"name": "DB_PASSWORD", "value": SECRET}]}
        ]
    },
}


@pytest.fixture
async def apiserver() -> AsyncIterator[str]:
    async def pod(_: web.Request) -> web.Response:
        return web.json_response(POD)

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/shop/pods/web-1", pod)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Each setup changes the process's loggers: put them back for the next test."""
    names = ["", "bridge", "k8s_event_consumer", *logformat.LIBRARIES, "test_subscriber"]
    saved = {
        n: (lg.level, lg.handlers[:], lg.propagate) for n in names for lg in [logging.getLogger(n)]
    }
    yield
    for n, (level, handlers, propagate) in saved.items():
        lg = logging.getLogger(n)
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate = propagate


async def _read_pod(host: str) -> None:
    from kubernetes_asyncio import client

    conf = client.Configuration(host=host)
    async with client.ApiClient(conf) as api:
        pod = await client.CoreV1Api(api).read_namespaced_pod("web-1", "shop")
    assert pod.spec.containers[0].env[0].value == SECRET  # the body did cross


SETUPS: dict[str, Callable[[], None]] = {
    "bridge": lambda: bridge_logs.setup("debug", "json"),
    "subscriber": lambda: consumer_logs.setup("debug", "json"),
    "subscriber-kit-own-logger": lambda: consumer_logs.setup(
        "debug", "text", own=("test_subscriber",)
    ),
}


@pytest.mark.parametrize("program", sorted(SETUPS))
async def test_at_debug_a_response_body_with_a_secret_is_not_logged(
    apiserver: str,
    restore_logging: None,
    capsys: pytest.CaptureFixture[str],
    program: str,
) -> None:
    SETUPS[program]()
    await _read_pod(apiserver)
    own = "bridge.test" if program == "bridge" else "k8s_event_consumer.test"
    logformat.Logger(own).debug("own_debug_line", n=1)
    if program == "subscriber-kit-own-logger":
        logformat.Logger("test_subscriber").debug("kit_debug_line")
    # what a library says at WARNING still reaches the log
    logging.getLogger("kubernetes_asyncio.client.rest").warning("library_warning")
    err = capsys.readouterr().err
    assert SECRET not in err, err[-2000:]
    assert "own_debug_line" in err
    if program != "bridge":  # the bridge formats its own loggers only (the root: Python's)
        assert "library_warning" in err
    if program == "subscriber-kit-own-logger":
        assert "kit_debug_line" in err
    for name in logformat.LIBRARIES:
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name
