import pytest

from bridge.sim.natsserver import NatsServer


@pytest.fixture
def nats_server(tmp_path):
    """A real nats-server -js on a free loopback port with its own store directory."""
    server = NatsServer(store_dir=str(tmp_path / "nats")).start()
    yield server
    server.stop()


@pytest.fixture
async def sim():
    """The simulated API server (bridge.sim) on a free loopback port: like a default
    kube-apiserver, no bookmarks on Event watches (a test that wants them sets
    ``sim.bookmark_interval``)."""
    from bridge.sim.apiserver import SimApiServer

    server = SimApiServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def kubeconfig(tmp_path, sim):
    from tests.integration.harness import write_kubeconfig

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


def pytest_collection_finish(session):
    """Build what the selected tests run and is not built yet, right after collection, outside
    pytest-timeout's per-test limit, with the builds' output on the terminal: Alertmanager
    (e2e/build-alertmanager.sh) for a module that uses ``Alertmanager``, and the Go tools a
    module names in ``GO_TOOLS`` (tests/gotools.py: promtool, helm). All cached. A failed build
    fails those tests with its message (never a skip)."""
    if session.config.option.collectonly:
        return
    modules = {item.module for item in session.items}
    wanted: list[str] = []
    if any(getattr(m, "Alertmanager", None) for m in modules):
        wanted.append("alertmanager")
    for m in modules:
        for tool in getattr(m, "GO_TOOLS", ()):
            if tool not in wanted:
                wanted.append(tool)
    if not wanted:
        return
    import time

    from tests import gotools
    from tests.alertmanager import AlertmanagerError, binary_path, ensure_alertmanager

    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    capman = session.config.pluginmanager.get_plugin("capturemanager")
    for tool in sorted(wanted):
        if tool == "alertmanager":
            build, path = ensure_alertmanager, str(binary_path())
        else:
            build, path = (lambda t=tool: gotools.ensure(t)), str(gotools.binary_path(tool))
        if tr is not None:
            tr.write_line(f"{tool}: {path} (a first build takes one to three minutes)")
        t0 = time.monotonic()
        try:
            if capman is not None:
                with capman.global_and_fixture_disabled():
                    build()
            else:
                build()
        except (AlertmanagerError, gotools.ToolError) as exc:
            if tr is not None:
                tr.write_line(f"{tool}: build FAILED: {exc}", red=True)
            continue
        if tr is not None:
            tr.write_line(f"{tool}: ready ({time.monotonic() - t0:.1f}s)")
