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
