"""The image, built by the tests (tools/image.py): from the Dockerfile by a real Docker Engine,
on the official base or, where it cannot be pulled, on a STAND-IN made from Debian's packages
(the output says which). Its size and what it holds, read from the layers it was saved with;
then the container, run by that engine as deploy/ runs it (read-only root, user 65532:65532,
every capability dropped, no new privileges, a tmpfs on /tmp), against the simulated API
server (sim/) and a real nats-server on this host: it publishes, answers /readyz and drains on
SIGTERM with exit 0; and each program's check-config in the image.

The engine has no bridge network (tools/image.py): the containers share the host's network,
so they reach the simulator and nats-server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from k8s_event_sim.kubeconfig import write_kubeconfig
from tests.integration.harness import BridgeProcess, Writer, all_of, bridge_config, readyz
from tools.image import Engine, Image, build_image, engine
from tools.imagelayers import Scan, config_secrets, scan, unwanted

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]  # a cold build: minutes

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
# The image's size (every layer, unpacked) may not pass this, per base (docs/e2e.md): the
# official python:3.11-slim is about 125 MiB of it, the stand-in about 170 MiB (Debian's full
# python3 and perl-base, apt); what this project adds is about 75 MiB.
SIZE_BOUND = {"official": 260 * MiB, "standin": 300 * MiB}
# How deploy/ runs it (deployment.yaml's securityContext, the emptyDir on /tmp).
AS_DEPLOYED = (
    "--read-only",
    "--tmpfs=/tmp",
    "--user=65532:65532",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--network=host",
)
PROGRAMS = {
    "k8s-event-bridge": {},
    "k8s-event-alerting": {},
    "k8s-event-remediation": {"REMEDIATION_KUBERNETES__CLUSTER": "check"},
    "k8s-event-otlp": {},
    "k8s-event-digests": {},
}


def tell(request: pytest.FixtureRequest, line: str) -> None:
    """A line in the test output itself (not captured)."""
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(line)


@pytest.fixture(scope="module")
def built(request: pytest.FixtureRequest) -> Image:
    image = build_image()
    base = f"STAND-IN base {image.base}" if image.standin else f"official base {image.base}"
    tell(request, f"image: {image.tag} built on the {base}: {image.size / MiB:.1f} MiB")
    return image


@pytest.fixture(scope="module")
def scanned(built: Image) -> Scan:
    found = scan(built.archive)
    assert found.id == built.id, f"{built.archive} holds another build than {built.id}"
    return found


def _id(eng: Engine, tag: str) -> str:
    done = eng.docker("image", "inspect", "--format={{.Id}}", tag, check=False)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def eng(built: Image) -> Iterator[Engine]:
    """The engine that built it, running for this module's containers, with that build under
    its tag (loaded from the archive if another build took the tag meanwhile)."""
    with engine() as e:
        if _id(e, built.tag) != built.id:
            e.docker("load", "--input", str(built.archive))
        assert _id(e, built.tag) == built.id, f"{built.archive} holds another build"
        yield e


def version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


# --- what it is -----------------------------------------------------------------------------


def test_the_image_is_within_the_size_bound_of_its_base(built: Image, scanned: Scan) -> None:
    kind = "standin" if built.standin else "official"
    unpacked = sum(e.size for e in scanned.files.values() if e.type == "file")
    assert unpacked <= built.size, "the engine's count misses files"
    assert built.size <= SIZE_BOUND[kind], (
        f"{built.describe()}: over the bound of {SIZE_BOUND[kind] / MiB:.0f} MiB for the "
        f"{kind} base"
    )


def test_the_image_holds_the_programs_and_no_compiler_pip_simulator_tests_or_git(
    scanned: Scan,
) -> None:
    files = scanned.files
    for program in PROGRAMS:
        assert f"opt/venv/bin/{program}" in files, f"{program} is not in the image"
    site = "opt/venv/lib/python3.11/site-packages"
    for package in ("bridge", "k8s_event_consumer", "k8s_event_common"):
        assert f"{site}/{package}/__init__.py" in files
        # compiled at install: a read-only root writes no bytecode at run time
        assert any(p.startswith(f"{site}/{package}/__pycache__/") for p in files), package
    assert unwanted(files) == {}


def test_the_base_s_pip_is_in_a_lower_layer_and_gone_from_the_image(scanned: Scan) -> None:
    """Both bases bring pip (the official one in /usr/local, the stand-in as ensurepip's
    wheels): the scan sees it in the layer that wrote it, and the final stage removed it."""
    assert any("pip" in unwanted(layer) for layer in scanned.written)
    assert "pip" not in unwanted(scanned.files)


def test_no_layer_and_no_setting_of_the_image_holds_a_secret(scanned: Scan) -> None:
    assert len(scanned.layers) >= 3  # the base's, the user's, the venv's
    assert scanned.secrets == []
    assert config_secrets(scanned.config) == []


def test_the_image_says_its_version_runs_as_65532_and_starts_the_bridge(scanned: Scan) -> None:
    config: dict[str, Any] = scanned.config["config"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == version()
    assert labels["org.opencontainers.image.title"] == "k8s-event-bridge"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert re.fullmatch(r"https://\S+", labels["org.opencontainers.image.source"])
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["k8s-event-bridge"]
    assert config["Cmd"] == ["run", "--config", "/etc/k8s-event-bridge/bridge.yaml"]
    assert config["WorkingDir"] == "/tmp"
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    assert not [e for e in config["Env"] if e.startswith("PIP_")], "pip settings, no pip"


# --- how it runs ----------------------------------------------------------------------------


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_each_program_checks_its_config_in_the_image(
    eng: Engine, built: Image, program: str
) -> None:
    env = [f"--env={k}={v}" for k, v in PROGRAMS[program].items()]
    done = eng.docker(
        "run", "--rm", *AS_DEPLOYED, *env, f"--entrypoint={program}", built.tag, "check-config",
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), f"{program} check-config printed nothing"


@dataclass
class ContainerBridge(BridgeProcess):
    """The bridge as a container of the image: ``docker run`` attached (its output is the
    log), signals sent by the engine to the container's process."""

    engine: Engine | None = None
    tag: str = ""
    name: str = ""
    inside: str = ""  # the config's path in the container
    what = "bridge container"

    def command(self) -> list[str]:
        assert self.engine is not None
        self.env = {**self.engine.env}
        return [
            "/usr/bin/docker", "run", f"--name={self.name}", *AS_DEPLOYED,
            f"--volume={self.config.parent}:/etc/k8s-event-bridge:ro",
            self.tag, "run", "--config", self.inside,
        ]  # fmt: skip

    def signal(self, sig: int) -> None:
        assert self.engine is not None
        self.engine.docker("kill", f"--signal={signal.Signals(sig).name}", self.name)

    def inspect(self) -> dict[str, Any]:
        assert self.engine is not None
        return dict(json.loads(self.engine.docker("inspect", self.name).stdout)[0])


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in lines)}


async def test_the_bridge_runs_as_deployed_publishes_is_ready_and_drains_on_sigterm(
    eng: Engine,
    built: Image,
    sim: Any,
    nats_server: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    kubeconfig = write_kubeconfig(etc / "kubeconfig", sim.url)
    config = bridge_config(
        etc, nats_server.url, Path("/etc/k8s-event-bridge/kubeconfig"), log={"level": "info"}
    )
    for path in (etc, kubeconfig, config):  # read by 65532 (a test's files, no real secret)
        path.chmod(0o755 if path.is_dir() else 0o644)
    bridge = ContainerBridge(
        config,
        tmp_path / "bridge.log",
        engine=eng,
        tag=built.tag,
        name=f"k8s-event-bridge-test-{uuid.uuid4().hex[:8]}",
        inside=f"/etc/k8s-event-bridge/{config.name}",
    )
    writer = Writer(sim)
    await writer.write(20, bump_ratio=0.0)
    bridge.start()
    try:
        await bridge.wait_ready(timeout=60)
        await writer.write(80, bump_ratio=0.3)
        published = await all_of(nats_server.url, writer.ids)
        assert sorted(published) == sorted(writer.ids)
        assert await readyz(bridge, 200)

        # as deployed: its user, no capability, no new privileges, a read-only root
        state = bridge.inspect()
        status = _status(int(state["State"]["Pid"]))
        assert status["Uid"].split() == ["65532"] * 4 and status["Gid"].split() == ["65532"] * 4
        assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
        assert status["NoNewPrivs"] == "1"
        assert state["HostConfig"]["ReadonlyRootfs"] is True
        wrote = eng.docker("exec", bridge.name, "sh", "-c", "echo x > /opt/venv/x", check=False)
        assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr
        memory = eng.docker(
            "stats", "--no-stream", "--format={{.MemUsage}}", bridge.name, check=False
        ).stdout.strip()
        tell(request, f"image: the bridge container uses {memory} (STAND-IN base)"
             if built.standin else f"image: the bridge container uses {memory}")  # fmt: skip

        bridge.signal(signal.SIGTERM)
        assert await bridge.wait_exit(timeout=60) == 0
        stopped = bridge.log_events("stopped")
        assert stopped and stopped[0]["drained"] is True, bridge.logs()[-3000:]
        assert bridge.inspect()["State"]["ExitCode"] == 0
    finally:
        bridge.kill()
        eng.docker("rm", "--force", bridge.name, check=False)


def test_no_container_of_this_module_is_left(eng: Engine) -> None:
    """Every container the tests above ran is gone (``--rm``, or removed by its test)."""
    assert eng.docker("ps", "--all", "--quiet").stdout.strip() == ""
