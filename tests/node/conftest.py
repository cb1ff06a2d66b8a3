"""Fixtures of the node tier (tests/node, marker ``node``): the application image, a real node
(tests/standins/node.py) and a nats-server the Pods reach, one each per session.

Right after collection, when a node test is selected, the session builds what the node runs,
outside pytest-timeout's per-test limit and with the progress on the terminal: the newest
Kubernetes with the living cluster's and the node's commands (``e2e/build-control-plane.sh
--living --node newest``) and the image (``tools.image.build_image()``: its own Docker Engine,
stopped again; the line says when the base is a stand-in). A failed build fails every node
test with its message, never a skip.

Every test of tests/node gets the ``node`` marker and, unless it sets its own, a timeout of
``NODE_TIMEOUT`` seconds (a Pod's start, a token's rotation). A failed test's report carries
the end of the kubelet's and containerd's logs; the node's logs are then kept (the teardown
says where).
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from k8s_event_sim.natsserver import NatsServer
from tests.standins.controlplane import ControlPlaneError, ensure_binaries, kubernetes_version
from tests.standins.node import Node
from tests.standins.node_host import address

HERE = Path(__file__).resolve().parent
NODE_TIMEOUT = 900
_built: dict[str, Any] = {}
_state: dict[str, Any] = {"node": None, "failed": False}


def _ours(item: pytest.Item) -> bool:
    return item.path.is_relative_to(HERE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _ours(item):
            item.add_marker(pytest.mark.node)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(NODE_TIMEOUT))


def _say(config: pytest.Config) -> Callable[[str], None]:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        if tr is None:
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(line)
        else:
            tr.write_line(line)

    return say


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not any(_ours(i) for i in session.items):
        return
    say = _say(session.config)
    version = kubernetes_version("newest")
    say(f"node: e2e/build-control-plane.sh --living --node {version} (cold: many minutes)")
    t0 = time.monotonic()
    try:
        _built["bin"] = ensure_binaries(version, living=True, node=True)
        say(f"node: binaries in {_built['bin']} ({time.monotonic() - t0:.1f}s)")
    except ControlPlaneError as e:
        _built["bin"] = e
        say(f"node: build FAILED: {e}")
    t0 = time.monotonic()
    try:
        from tools.image import build_image

        image = build_image()
        _built["image"] = image
        base = f"on a STAND-IN base {image.base}" if image.standin else f"on {image.base}"
        say(
            f"node: image {image.tag} {base}, {image.size / 2**20:.0f} MiB, archive "
            f"{image.archive} ({time.monotonic() - t0:.1f}s)"
        )
    except Exception as e:
        _built["image"] = e
        say(f"node: image build FAILED: {e}")


def _get(key: str) -> Any:
    found = _built.get(key)
    if isinstance(found, Exception):
        pytest.fail(f"node tier: {key} unavailable: {found}", pytrace=False)
    return found


@pytest.fixture(scope="session")
def image() -> Any:
    """The application image (``tools.image.Image``: ``tag``, ``archive``, ``base``,
    ``standin``, ``size``), built once per session right after collection."""
    if "image" not in _built:
        from tools.image import build_image

        _built["image"] = build_image()
    return _get("image")


@pytest.fixture(scope="session")
def node(request: pytest.FixtureRequest, image: Any) -> Iterator[Node]:
    """The real node, the image imported (``node.image`` is its tag); undone at the end."""
    bin_path = _get("bin") if "bin" in _built else None
    n = Node(image, bin_path=bin_path, say=_say(request.config))
    # a SIGTERM (tools/testrun.py stopping the run) unwinds through the teardown
    previous = signal.signal(signal.SIGTERM, _interrupt)
    _state["node"] = n
    try:
        n.start()
        yield n
    finally:
        n.keep_logs = n.keep_logs or _state["failed"]
        _state["node"] = None
        try:
            n.stop()
        finally:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A nats-server with JetStream on the host's address and a free port (``nats.url``)."""
    server = NatsServer(str(tmp_path_factory.mktemp("nats")), host=address()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def namespace(node: Node, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for the test (its ``default`` ServiceAccount and ``kube-root-ca.crt``
    there), deleted with everything in it afterwards."""
    words = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))
    name = "t-" + words[:50].strip("-")
    node.create_namespace(name)
    try:
        yield name
    finally:
        node.delete_namespace(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    n = _state["node"]
    if report.failed and _ours(item):
        _state["failed"] = True
        if n is not None:
            report.sections.append(("node: the end of its logs", n.log_tails(40)))
