"""The image the tests build and run: ``k8s-event-bridge:test`` from the Dockerfile, built by
a Docker Engine that this module starts and stops.

    build_image() -> Image     the tag, its ``docker save`` archive (in the cache), the base
                               it was built on (a STAND-IN or not) and its size
    engine()                   a context manager: the engine, for tests that run containers

tools/imagelayers.py reads what a saved image holds.

    python -m tools.image [--base TAG|standin]      (make image)

The engine is Debian's ``dockerd`` (package ``docker.io``, installed with apt-get when missing)
with its own data-root under the cache (``~/.cache/k8s-event-bridge/docker``: the layers stay
cached between runs), socket, exec-root, pidfile and cgroup parent, no iptables rules and no
bridge; overlay2 where an overlay mount works, vfs otherwise (``K8S_EVENT_BRIDGE_DOCKER_STORAGE``
chooses). A machine-wide ``flock`` on the data-root makes a second engine wait. It stops by its
pid, and so does its containerd child.

The base: ``K8S_EVENT_BRIDGE_IMAGE_BASE`` when set (a tag, or ``standin``); else the
Dockerfile's default (the official ``python:3.11-slim``) when the engine has it or pulls it
within ``PULL_TIMEOUT``; else the STAND-IN from Debian's packages with the same Python minor
(e2e/build-image-base.sh, then ``docker import``), said wherever it is used. The build:
BuildKit through Debian's own client (``/usr/bin/docker``; a newer client without buildx
refuses it) with ``--network host``, as the engine has no bridge.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
TAG = "k8s-event-bridge:test"
STANDIN_REPOSITORY = "k8s-event-bridge-base"
PULL_TIMEOUT = 60.0  # seconds: "can be pulled quickly"; a registry out of reach fails sooner
DOCKER = "/usr/bin/docker"  # Debian's client: BuildKit without the buildx plugin
DOCKERD = "/usr/sbin/dockerd"
BASE_ENV = "K8S_EVENT_BRIDGE_IMAGE_BASE"
DRIVER_ENV = "K8S_EVENT_BRIDGE_DOCKER_STORAGE"  # overlay2 or vfs: else overlay2 where it works
BUILD_CACHE = "2GB"  # BuildKit's cache kept in the engine's data-root
KEEP_ARCHIVES = 3  # saved images of one tag kept in the cache, the last used
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(RuntimeError):
    """The engine, the base or the build failed; the message says what and where the log is."""


def cache_dir() -> Path:
    """``$K8S_EVENT_BRIDGE_CACHE``, else ``$XDG_CACHE_HOME/k8s-event-bridge`` (~/.cache), as
    the e2e/ build scripts have it."""
    own = os.environ.get("K8S_EVENT_BRIDGE_CACHE")
    if own:
        return Path(own)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "k8s-event-bridge"


def say(message: str) -> None:
    print(f"tools.image: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Image:
    """An image built here and saved (``docker save``) to ``archive``."""

    tag: str
    archive: Path
    base: str  # the BASE build argument it was built with
    standin: bool  # True: ``base`` is the stand-in from Debian's packages, not the official
    size: int  # bytes, as the engine counts it (every layer, unpacked)
    id: str = ""
    timings: tuple[tuple[str, float], ...] = ()  # (step, seconds) of this build

    def describe(self) -> str:
        on = (
            f"the STAND-IN base {self.base} (Debian's packages, e2e/build-image-base.sh)"
            if self.standin
            else f"the base {self.base}"
        )
        return f"{self.tag} on {on}: {self.size / 2**20:.1f} MiB"


# --- the base -------------------------------------------------------------------------------


def official_base(dockerfile: str) -> str:
    """The default of ``ARG BASE=...`` before the Dockerfile's first FROM."""
    for line in dockerfile.splitlines():
        line = line.strip()
        if line.upper().startswith("FROM "):
            break
        m = re.fullmatch(r"ARG\s+BASE=(\S+)", line, re.I)
        if m:
            return m.group(1)
    raise ImageError("the Dockerfile has no ARG BASE=... before its first FROM")


@dataclass(frozen=True)
class BaseChoice:
    base: str | None  # None: the stand-in (its tag is known once it is imported)
    reason: str

    @property
    def standin(self) -> bool:
        return self.base is None


def choose_base(
    official: str,
    *,
    override: str | None,
    present: Callable[[str], bool],
    pull: Callable[[str], str | None],
) -> BaseChoice:
    """Which base to build on: ``override`` (``standin`` or a tag), else ``official`` when the
    engine has it (``present``) or ``pull`` gets it (it returns None, or why not), else the
    stand-in."""
    if override == "standin":
        return BaseChoice(None, f"{BASE_ENV}=standin")
    if override:
        return BaseChoice(override, f"{BASE_ENV}={override}")
    if present(official):
        return BaseChoice(official, "the engine has it")
    failed = pull(official)
    if failed is None:
        return BaseChoice(official, "pulled")
    return BaseChoice(None, f"{official} could not be pulled ({failed})")


# --- the engine -----------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def _stop_pid(pid: int, grace: float) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; returns once the process is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)


def overlay_works(where: Path) -> bool:
    """Whether an overlay mount works on the filesystem of ``where`` (overlay2 needs it)."""
    where.mkdir(parents=True, exist_ok=True)
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=where))
    try:
        for d in ("lower", "upper", "work", "merged"):
            (probe / d).mkdir()
        options = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(probe / "merged")],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            return False
        subprocess.run(["umount", str(probe / "merged")], capture_output=True, check=False)
        return True
    finally:
        shutil.rmtree(probe, ignore_errors=True)


POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def ensure_installed() -> None:
    """Debian's docker.io (dockerd, containerd, runc and its own client), installed with
    apt-get as root when missing, without its recommends and without starting the system's
    Docker service (a policy-rc.d that refuses, only while apt-get runs, when none is there)."""
    if Path(DOCKERD).exists() and Path(DOCKER).exists():
        return
    if os.geteuid() != 0:
        raise ImageError(f"{DOCKERD} or {DOCKER} is missing: apt-get install docker.io (as root)")
    say("installing docker.io (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io"]
    policy = not POLICY_RC_D.exists()
    if policy:
        POLICY_RC_D.write_text(
            "#!/bin/sh\n# tools/image.py: no service started by apt-get\nexit 101\n"
        )
        POLICY_RC_D.chmod(0o755)
    try:
        for cmd in (["apt-get", "update", "-qq"], install):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ImageError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    finally:
        if policy:
            POLICY_RC_D.unlink(missing_ok=True)


@dataclass
class Engine:
    """A Docker Engine of this module's own: dockerd on ``root`` (data-root, socket, pidfile,
    log), an exec-root and a cgroup parent named after it."""

    root: Path
    driver: str = ""
    proc: subprocess.Popen[bytes] | None = None
    containerd: int | None = None
    _lock: IO[bytes] | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:8]

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    @property
    def socket(self) -> Path:
        return self.root / "run" / "docker.sock"

    @property
    def exec_root(self) -> Path:  # short: containerd's sockets live below it
        return Path("/run") / f"k8s-event-bridge-docker-{self.key}"

    @property
    def pidfile(self) -> Path:
        return self.root / "run" / "dockerd.pid"

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    @property
    def cgroup_parent(self) -> str:
        return f"k8s-event-bridge-docker-{self.key}"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def env(self) -> dict[str, str]:
        """The client's environment: this engine, BuildKit, and a config directory of its own
        (no credentials of the machine's are read or written)."""
        return {
            **os.environ,
            "DOCKER_HOST": self.host,
            "DOCKER_CONFIG": str(self.root / "client"),
            "DOCKER_BUILDKIT": "1",
        }

    def docker(
        self, *args: str, check: bool = True, timeout: float | None = 600, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``/usr/bin/docker ARGS`` against this engine; ImageError with its stderr when it
        fails and ``check``."""
        done = subprocess.run(
            [DOCKER, *args],
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise ImageError(f"docker {' '.join(args[:3])} ...: {done.stderr.strip()[-2000:]}")
        return done

    def has(self, ref: str) -> bool:
        return self.docker("image", "inspect", ref, check=False).returncode == 0

    # -- start and stop

    def start(self, timeout: float = 90.0) -> None:
        ensure_installed()
        for d in (self.data_root, self.socket.parent, self.root / "client"):
            d.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            self._stop_leftover()
            self.driver = os.environ.get(DRIVER_ENV) or (
                "overlay2" if overlay_works(self.data_root) else "vfs"
            )
            if not self._run(timeout) and self.driver == "overlay2":
                say("dockerd did not start with overlay2; vfs instead")
                self.driver = "vfs"
                if not self._run(timeout):
                    raise ImageError(f"dockerd did not start: {self._log_tail()}")
            elif self.proc is None or self.proc.poll() is not None:
                raise ImageError(f"dockerd did not start: {self._log_tail()}")
        except BaseException:
            self.stop()
            raise

    def _take_lock(self) -> None:
        self._lock = open(self.root / "engine.lock", "ab")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another engine runs on {self.data_root}: waiting for it to stop")
            fcntl.flock(self._lock, fcntl.LOCK_EX)

    def _stop_leftover(self) -> None:
        """A dockerd on this data-root left by a run that died (the lock is ours now)."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(self.pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if _alive(pid) and f"--data-root={self.data_root}".encode() in cmdline:
                say(f"stopping dockerd {pid}, left on {self.data_root} by an earlier run")
                children = _children(pid)
                _stop_pid(pid, 30)
                for child in children:
                    _stop_pid(child, 10)

    def _run(self, timeout: float) -> bool:
        """Start dockerd; True once it answers, False if it exited first."""
        config = self.root / "daemon.json"  # not the machine's /etc/docker/daemon.json
        config.write_text("{}\n")
        cmd = [
            DOCKERD,
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pidfile}",
            f"--host={self.host}",
            f"--config-file={config}",
            f"--storage-driver={self.driver}",
            f"--cgroup-parent={self.cgroup_parent}",
            "--exec-opt=native.cgroupdriver=cgroupfs",
            "--iptables=false",
            "--ip-masq=false",
            "--bridge=none",
            "--userland-proxy=false",
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%F %T')} {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self._answers():
                self.containerd = next(
                    (c for c in _children(self.proc.pid) if _comm(c) == "containerd"), None
                )
                return True
            time.sleep(0.2)
        raise ImageError(f"dockerd did not answer in {timeout:.0f} s: {self._log_tail()}")

    def _answers(self) -> bool:
        """The dockerd started here (its pid in the pidfile) answers on the socket."""
        assert self.proc is not None
        try:
            ours = self.pidfile.read_text().strip() == str(self.proc.pid)
        except OSError:
            return False
        return ours and self.docker("version", check=False).returncode == 0

    def _log_tail(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"{self.log_path}:\n{text[-2000:]}"

    def stop(self) -> None:
        """Stop what start started (dockerd, then its containerd if it outlived it), by pid,
        and undo the rest: the exec-root, the cgroup parent; the lock goes last."""
        if self.proc is not None:
            children = _children(self.proc.pid)
            _stop_pid(self.proc.pid, 60)
            self.proc.wait()
            for pid in {*children, *([self.containerd] if self.containerd else [])}:
                _stop_pid(pid, 10)
            self.proc = None
            # what dockerd leaves mounted there when it stops short (netns/default)
            for mount in sorted(_mounts_below(self.exec_root), reverse=True):
                subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False)
            shutil.rmtree(self.exec_root, ignore_errors=True)
            for parent in Path("/sys/fs/cgroup").glob(f"*/{self.cgroup_parent}"):
                below = [p for p in parent.rglob("*") if p.is_dir()]  # buildkit/, <container>/
                for cgroup in [*sorted(below, key=lambda p: -len(p.parts)), parent]:
                    with contextlib.suppress(OSError):
                        cgroup.rmdir()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _mounts_below(path: Path) -> list[str]:
    points = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()]
    return [p for p in points if p == str(path) or p.startswith(f"{path}/")]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


_running: dict[Path, tuple[Engine, int]] = {}


@contextlib.contextmanager
def engine(root: Path | None = None) -> Iterator[Engine]:
    """The engine on ``root`` (default: the cache's ``docker``), started here and stopped at
    the end; nested uses in one process share it."""
    root = (root or cache_dir() / "docker").resolve()
    if root in _running:
        eng, depth = _running[root]
        _running[root] = (eng, depth + 1)
    else:
        eng = Engine(root)
        started = time.monotonic()
        eng.start()
        say(f"engine up in {time.monotonic() - started:.1f} s ({eng.driver}, {eng.host})")
        _running[root] = (eng, 1)
    try:
        yield eng
    finally:
        eng, depth = _running[root]
        if depth > 1:
            _running[root] = (eng, depth - 1)
        else:
            del _running[root]
            eng.stop()


# --- the build ------------------------------------------------------------------------------


def _pull(eng: Engine, timeout: float) -> Callable[[str], str | None]:
    def pull(ref: str) -> str | None:
        try:
            done = eng.docker("pull", "--quiet", ref, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"no answer in {timeout:.0f} s"
        if done.returncode == 0:
            return None
        lines = done.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit {done.returncode}"

    return pull


def standin_base(eng: Engine, cache: Path) -> str:
    """The stand-in base in the engine: built (or found cached) by e2e/build-image-base.sh,
    then imported; its tag names it a stand-in and the tarball's key."""
    done = subprocess.run(
        ["bash", str(ROOT / "e2e" / "build-image-base.sh")],
        env={**os.environ, "K8S_EVENT_BRIDGE_CACHE": str(cache)},
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ImageError("e2e/build-image-base.sh failed (its messages are above)")
    tarball = Path(done.stdout.strip().splitlines()[-1])
    name = tarball.name.removesuffix(".tar").removeprefix("base-")  # standin-bookworm-<key>
    tag = f"{STANDIN_REPOSITORY}:{name}"
    if not eng.has(tag):
        eng.docker(
            "import",
            "--change",
            f"ENV PATH={DEFAULT_PATH}",
            "--change",
            "ENV LANG=C.UTF-8",
            "--change",
            'CMD ["python3"]',
            "--message",
            "STAND-IN for the official Python base: Debian's packages (e2e/build-image-base.sh)",
            str(tarball),
            tag,
        )
    return tag


def _prune(eng: Engine, cache: Path, archive: Path) -> None:
    """What earlier builds left: archives of the same name but the KEEP_ARCHIVES used last,
    stand-in bases whose tarball the script has pruned (unused for a week), untagged images,
    build cache beyond BUILD_CACHE (the newest stays)."""
    same = archive.name.rsplit("-", 1)[0]
    older = sorted(
        (p for p in archive.parent.glob(f"{same}-*.tar") if p.name.rsplit("-", 1)[0] == same),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in older[KEEP_ARCHIVES:]:
        if old != archive:
            old.unlink(missing_ok=True)
    listed = eng.docker("image", "ls", "--format={{.Repository}}:{{.Tag}}", STANDIN_REPOSITORY)
    for ref in listed.stdout.split():
        if not (cache / "images" / f"base-{ref.partition(':')[2]}.tar").exists():
            eng.docker("rmi", ref, check=False)
    eng.docker("image", "prune", "--force", check=False)
    eng.docker("builder", "prune", "--force", f"--keep-storage={BUILD_CACHE}", check=False)


def archive_name(tag: str, standin: bool, image_id: str) -> str:
    """``<tag>[-standin]-<id>.tar``: named by what it holds, so a build of another checkout
    sharing the cache never replaces an archive that a test is reading."""
    name = re.sub(r"[^\w.-]+", "-", tag)
    return f"{name}{'-standin' if standin else ''}-{image_id.removeprefix('sha256:')[:12]}.tar"


_built: dict[tuple[str, str | None, Path, Path], Image] = {}


def build_image(
    *,
    tag: str = TAG,
    base: str | None = None,
    context: Path = ROOT,
    cache: Path | None = None,
    pull_timeout: float = PULL_TIMEOUT,
) -> Image:
    """Build ``tag`` from ``context``'s Dockerfile on a base chosen as the module says
    (``base``: a tag or ``standin``, as ``K8S_EVENT_BRIDGE_IMAGE_BASE``), save it to the cache's
    ``images/`` and return it. The engine is started and stopped here unless one is running in
    this process (``engine()``). Once per process for the same arguments."""
    cache = cache or cache_dir()
    override = base if base is not None else os.environ.get(BASE_ENV) or None
    key = (tag, override, context.resolve(), cache.resolve())
    if key in _built and _built[key].archive.exists():
        return _built[key]
    images = cache / "images"
    images.mkdir(parents=True, exist_ok=True)
    timings: list[tuple[str, float]] = []
    started = time.monotonic()

    def lap(step: str) -> None:
        nonlocal started
        now = time.monotonic()
        timings.append((step, round(now - started, 1)))
        started = now

    with engine(cache / "docker") as eng:
        lap("engine")
        official = official_base((context / "Dockerfile").read_text())
        choice = choose_base(
            official, override=override, present=eng.has, pull=_pull(eng, pull_timeout)
        )
        chosen = choice.base if choice.base is not None else standin_base(eng, cache)
        if choice.standin:
            say(f"base: STAND-IN {chosen}, not the official {official}: {choice.reason}")
        else:
            say(f"base: {chosen} ({choice.reason})")
        lap("base")
        log = images / "build.log"
        with open(log, "wb") as out:
            done = subprocess.run(
                [
                    DOCKER,
                    "build",
                    "--progress=plain",
                    "--network=host",
                    f"--build-arg=BASE={chosen}",
                    f"--tag={tag}",
                    str(context),
                ],
                env=eng.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-3000:]
            raise ImageError(f"docker build failed on {chosen} ({log}):\n{tail}")
        lap("build")
        inspected = json.loads(eng.docker("image", "inspect", tag).stdout)[0]
        image_id, size = str(inspected["Id"]), int(inspected["Size"])
        archive = images / archive_name(tag, choice.standin, image_id)
        if archive.exists():
            archive.touch()  # in use: see _prune
        else:
            partial = archive.with_name(archive.name + ".partial")
            eng.docker("save", "--output", str(partial), tag)
            partial.replace(archive)
        lap("save")
        _prune(eng, cache, archive)
    image = Image(tag, archive, chosen, choice.standin, size, image_id, tuple(timings))
    say(f"built {image.describe()}; saved to {archive} ({_seconds(timings)})")
    _built[key] = image
    return image


def _seconds(timings: list[tuple[str, float]] | tuple[tuple[str, float], ...]) -> str:
    return ", ".join(f"{step} {s:.1f} s" for step, s in timings)


# --- the command ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.image",
        description=f"Build {TAG} with an engine of its own and save it to the cache.",
    )
    parser.add_argument("--base", help="a base image tag, or 'standin' (default: as available)")
    parser.add_argument("--tag", default=TAG)
    args = parser.parse_args(argv)
    try:
        image = build_image(tag=args.tag, base=args.base)
    except ImageError as e:
        print(f"tools.image: ERROR: {e}", file=sys.stderr)
        return 1
    print(f"{image.describe()}{' (STAND-IN base)' if image.standin else ''}")
    print(f"archive: {image.archive}")
    print(f"timings: {_seconds(image.timings)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
