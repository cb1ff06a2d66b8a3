import threading
import time
from pathlib import Path

import pytest

from k8s_event_sim.natsserver import NatsServer


@pytest.fixture
def nats_server(tmp_path):
    """A real nats-server -js on a free loopback port with its own store directory."""
    server = NatsServer(store_dir=str(tmp_path / "nats")).start()
    yield server
    server.stop()


@pytest.fixture
async def sim():
    """The simulated API server (k8s_event_sim) on a free loopback port: like a default
    kube-apiserver, no bookmarks on Event watches (a test that wants them sets
    ``sim.bookmark_interval``)."""
    from k8s_event_sim.apiserver import SimApiServer

    server = SimApiServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def leasing_sim():
    """The simulated API server with the Lease calls of leader election
    (tests/support.py's ``LeasingSim``)."""
    from tests.support import LeasingSim

    server = LeasingSim()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def kubeconfig(tmp_path, sim):
    from tests.support import write_kubeconfig

    return write_kubeconfig(tmp_path / "kubeconfig", sim.url)


@pytest.fixture
def run_bridge(tmp_path, nats_server, kubeconfig):
    """Start ``k8s-event-bridge run`` processes; every one is killed at the end."""
    from tests.integration.harness import Bridges, bridge_config

    bridges = Bridges(tmp_path)

    def start(config=None, env=None, prelude="", **sections):
        cfg = config or bridge_config(tmp_path, nats_server.url, kubeconfig, **sections)
        return bridges.start(cfg, env=env or {}, prelude=prelude)

    yield start
    bridges.kill_all()


_background: dict[str, tuple[threading.Thread, float]] = {}
_failed: dict[str, BaseException] = {}
UNIT = Path(__file__).resolve().parent / "unit"


def pytest_addoption(parser):
    parser.addoption(
        "--go-tools",
        choices=("any", "none", "only"),
        default="any",
        help="select the tests by whether they run a Go tool besides the control plane "
        "(tests/standins/gotools.py; Alertmanager): none leaves them out, only keeps just them "
        "(tools/testrun.py runs the two apart, the second once the tools are built)",
    )


def go_tools(item) -> list[str]:
    """The Go tools a test runs (its module's ``GO_TOOLS``, and alertmanager when its module
    uses ``Alertmanager``); none for a unit test not marked ``processes`` (it starts no
    process: tests/unit/conftest.py)."""
    if item.path.is_relative_to(UNIT) and item.get_closest_marker("processes") is None:
        return []
    module = item.module
    tools = ["alertmanager"] if getattr(module, "Alertmanager", None) else []
    return tools + [tool for tool in getattr(module, "GO_TOOLS", ()) if tool not in tools]


def pytest_collection_modifyitems(config, items):
    which = config.getoption("--go-tools")
    if which == "any":
        return
    keep = [item for item in items if bool(go_tools(item)) == (which == "only")]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    """Start building what the selected tests run and is not built yet, right after collection,
    in the background: Alertmanager (e2e/build-alertmanager.sh) for a module that uses
    ``Alertmanager``, and the Go tools a module names in ``GO_TOOLS`` (tests/standins/gotools.py:
    promtool, helm), as ``go_tools`` reads them (none for a unit test not marked
    ``processes``: ``make quick`` builds nothing). They build while tests/e2e/conftest.py builds
    the control plane (the downloads of one overlap the compiles of another: a cold CI run is
    minutes shorter), and ``pytest_runtestloop`` waits for them before the first test, so no
    test runs beside a build. All cached: a built tool only answers --version. A failed build
    fails those tests with its message (never a skip)."""
    if session.config.option.collectonly:
        return
    wanted: list[str] = []
    for item in session.items:
        for tool in go_tools(item):
            if tool not in wanted:
                wanted.append(tool)
    from tests.standins import gotools

    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    for tool in sorted(wanted):
        if tr is not None:
            path = gotools.binary_path(tool)
            tr.write_line(f"{tool}: {path} (built in the background when missing)")

        def run(tool=tool):
            try:
                gotools.ensure(tool)
            except BaseException as exc:  # reported by pytest_runtestloop
                _failed[tool] = exc

        thread = threading.Thread(target=run, name=f"build-{tool}", daemon=True)
        thread.start()
        _background[tool] = (thread, time.monotonic())


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Wait for the background builds before the first test (the tests that need one get its
    error from ``ensure``)."""
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    for tool, (thread, t0) in sorted(_background.items()):
        thread.join()
        if tr is None:
            continue
        if tool in _failed:
            tr.write_line(f"{tool}: build FAILED: {_failed[tool]}", red=True)
        else:
            tr.write_line(f"{tool}: ready ({time.monotonic() - t0:.1f}s after collection)")
    _background.clear()
