"""``make test`` (and CI's ``.ci/run``): every check and every test, the Go builds overlapped
with the tests that need none, two pytest processes side by side (and the node tier beside them).

One thread builds, one step after another and at low priority (``nice``), what the tests run
besides Python: what the e2e tiers, the longest, need first (helm, Alertmanager, the newest
Kubernetes with the living cluster and the node's kubelet and kube-proxy, ``--living --node``,
the OpenTelemetry Collector, then the oldest's control plane: docs/e2e.md), then the tools only
the go-tools tier runs (natsauth, goref, promtool). Another thread builds the application image
meanwhile (``python -m tools.image``: its own Docker Engine, started and stopped; mostly
downloads and unpacking, not the compiler the Go builds keep busy). The tiers start as soon as
what they need is there:

=============  ====================================================  ==============================
tier           what                                                  waits for
=============  ====================================================  ==============================
lint           ``make lint``                                         nothing
unit+integ     tests/unit and tests/integration, without Go tools    nothing
               and without the heaviest files (``HEAVY``)
integ-heavy    those files of tests/integration                      nothing
e2e-newest     tests/e2e on the newest Kubernetes                    its build, helm, Alertmanager,
                                                                     otelcol
e2e-oldest     tests/e2e on the oldest Kubernetes                    its build, helm, Alertmanager
go-tools       the tests of unit and integration that run a Go tool  the small tools
node           tests/node: the image as real Pods on a real kubelet  newest, helm, Alertmanager,
                                                                     the image
=============  ====================================================  ==============================

At most ``--jobs`` (3) pytest processes run at once, lint and the node tier beside them; of the
tiers ready and waiting, the first in that order goes first. Three, on 2 cores: the tiers spend
most of their time waiting on the servers and programs they start (the whole run used 1.4 of
the 2 cores with two at once), so a third costs the others about a quarter of their speed and
saves more; the unit and integration tests in two tiers keep either from being the one that
ends last.

Why the node tier takes no slot: it is long (about 12 minutes) and nearly all of it is waiting
on the wall clock, not work: a service-account token of 600 s must reach the 80 % of its life
at which the kubelet rotates it, a drain runs out its grace period, a standby waits out the
leader's Lease. Its processes (etcd, kube-apiserver, the controller-manager, the scheduler,
containerd, the kubelet, kube-proxy, a few Pods) idle at about 5 % of one core (docs/e2e.md,
the node tier). In a slot it would hold one of the two pytest processes for those 12 minutes
and lengthen the warm run by about that much; beside them it costs the others a few percent of
CPU and ends well before the longest of them. It shares nothing with them: its API server is
its own, on the host's address; its iptables rules touch only its Service range and the host's
address; one node per machine (a lock).
Each tier writes its log and a JUnit report to the output directory; at the end each tier's
log is printed whole (with ``--durations=30``: where the time goes), then each tier's pytest
summary, then one line counting every tier: ``N passed, N failed, N skipped`` (a tier that
failed with no failed test, lint for one, counts as one failed). The exit status
is non-zero when a tier failed, a build failed (its tests count as failed: never a skip), or a
tier selected no tests (pytest's exit 5) unless ``TEST_ARGS`` narrowed the selection. Every
process started here is in its own process group and is killed at the end, whatever happens.

    python -m tools.testrun [--jobs 3] [--out DIR] [-- extra pytest arguments]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DURATIONS = "--durations=30"


@dataclass
class Build:
    name: str
    argv: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False
    seconds: float = 0.0
    log: Path | None = None


@dataclass
class Tier:
    name: str
    argv: list[str]
    needs: list[str]
    env: dict[str, str] = field(default_factory=dict)
    rc: int | None = None
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    summary: str = ""
    note: str = ""


class Processes:
    """Every child started here, each in its own process group, all killed by :meth:`close`."""

    def __init__(self) -> None:
        self._live: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self.closing = False

    def run(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> int:
        with self._lock:
            if self.closing:
                return -signal.SIGTERM
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    list(argv),
                    cwd=REPO,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **(env or {})},
                    start_new_session=True,
                )
            self._live.add(proc)
        try:
            return proc.wait()
        finally:
            with self._lock:
                self._live.discard(proc)

    def close(self) -> None:
        with self._lock:
            self.closing = True
            live = list(self._live)
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in live:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class Slots:
    """At most ``n`` tiers at once; of those waiting, the one first in ``order`` goes first."""

    def __init__(self, n: int, order: list[str]) -> None:
        self.free = n
        self.order = order
        self.waiting: set[str] = set()
        self.cond = threading.Condition()

    @contextlib.contextmanager
    def take(self, name: str) -> Iterator[None]:
        with self.cond:
            self.waiting.add(name)
            self.cond.wait_for(
                lambda: self.free > 0 and min(self.waiting, key=self.order.index) == name
            )
            self.waiting.discard(name)
            self.free -= 1
            self.cond.notify_all()
        try:
            yield
        finally:
            with self.cond:
                self.free += 1
                self.cond.notify_all()


def builds() -> list[Build]:
    nice = ["nice", "-n", "10", "bash"]
    return [
        # the e2e tiers are the longest: what they need first (helm and Alertmanager, then each
        # version), the tools only the short go-tools tier runs last
        Build("helm", [*nice, "e2e/build-go-tool.sh", "helm"]),
        Build("alertmanager", [*nice, "e2e/build-alertmanager.sh"]),
        Build("newest", [*nice, "e2e/build-control-plane.sh", "--living", "--node", "newest"]),
        # after the newest: its e2e tier waits for both, the node tier only for the newest
        Build("otelcol", [*nice, "e2e/build-otelcol.sh"]),
        Build("oldest", [*nice, "e2e/build-control-plane.sh", "oldest"]),
        Build("natsauth", [*nice, "e2e/build-go-tool.sh", "natsauth"]),
        Build("goref", [*nice, "e2e/build-go-tool.sh", "goref"]),
        Build("promtool", [*nice, "e2e/build-go-tool.sh", "promtool"]),
    ]


def image_builds() -> list[Build]:
    """Built beside the Go builds, in their own thread (see the module's docstring)."""
    return [Build("image", ["nice", "-n", "10", str(BIN / "python"), "-m", "tools.image"])]


TOOLS = ["natsauth", "goref", "alertmanager", "otelcol", "promtool", "helm"]
# the integration tests' longest files, a tier of their own beside the rest of the unit and
# integration tests, so that neither outlasts the e2e tiers (measured on 2 cores, 2026-12-07:
# these about 13 minutes, the rest 12, the e2e tiers 13 and 7, go-tools 3.5)
HEAVY = (
    "test_nats_permissions",
    "test_readme_installs",
    "test_nats_hung_node",
    "test_soak",
    "test_nats_cluster",
    "test_install",
)
# the tiers that take no pytest slot (lint runs no pytest; the node tier mostly waits)
BESIDE = ("lint", "node")


def tiers(extra: list[str], out: Path) -> list[Tier]:
    pytest = [str(BIN / "pytest"), "-p", "no:cacheprovider", DURATIONS, *extra]

    def junit(name: str) -> str:
        return f"--junitxml={out / (name + '.xml')}"

    both = ["tests/unit", "tests/integration"]
    heavy = [f"tests/integration/{name}.py" for name in HEAVY]
    return [
        Tier("lint", ["make", "--no-print-directory", "lint"], []),
        Tier(
            "unit+integration",
            [
                *pytest,
                junit("unit+integration"),
                "--go-tools=none",
                *both,
                *(f"--ignore={path}" for path in heavy),
            ],
            [],
        ),
        Tier(
            "integration-heavy",
            [*pytest, junit("integration-heavy"), "--go-tools=none", *heavy],
            [],
        ),
        Tier(
            "e2e-newest",
            [*pytest, junit("e2e-newest"), "tests/e2e"],
            ["helm", "alertmanager", "otelcol", "newest"],
            {"K8S_EVENT_BRIDGE_E2E_VERSIONS": "newest"},
        ),
        Tier(
            "e2e-oldest",
            [*pytest, junit("e2e-oldest"), "tests/e2e"],
            ["helm", "alertmanager", "oldest"],
            {"K8S_EVENT_BRIDGE_E2E_VERSIONS": "oldest"},
        ),
        Tier("go-tools", [*pytest, junit("go-tools"), "--go-tools=only", *both], TOOLS),
        Tier(
            "node",
            [*pytest, junit("node"), "tests/node"],
            ["helm", "alertmanager", "newest", "image"],
        ),
    ]


def counts(report: Path) -> dict[str, int]:
    """passed, failed (failures and errors) and skipped, from a JUnit report."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError):
        return {}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = failed = skipped = 0
    for suite in suites:
        total += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}


def collected(tier: Tier, procs: Processes, out: Path) -> int:
    """How many tests a tier selects (for a tier whose build failed: they count as failed)."""
    argv = [a for a in tier.argv if not a.startswith(("--junitxml", DURATIONS))]
    log = out / f"{tier.name}.collect.log"
    procs.run([*argv, "--collect-only", "-q"], log, tier.env)
    lines = log.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if "::" in line)


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "(no output)"


def say(text: str) -> None:
    print(f"[testrun {time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.testrun", description=__doc__)
    parser.add_argument("--jobs", type=int, default=3, help="pytest processes at once (3)")
    parser.add_argument("--out", type=Path, help="logs and JUnit reports (default: a temp dir)")
    parser.add_argument(
        "--no-builds",
        action="store_true",
        help="start no build here (each tier's pytest still builds what it misses, after "
        "collection): for a machine where another build of the same cache is running",
    )
    parser.add_argument("pytest_args", nargs="*", help="more arguments for every pytest")
    args = parser.parse_args(argv)
    extra = list(args.pytest_args) + shlex.split(os.environ.get("TEST_ARGS", ""))
    out = args.out or Path(tempfile.mkdtemp(prefix="k8s-event-bridge-test-"))
    out.mkdir(parents=True, exist_ok=True)
    procs = Processes()
    chains = [builds(), image_builds()]
    steps = {b.name: b for chain in chains for b in chain}
    run = tiers(extra, out)
    started = time.monotonic()
    say(f"logs and reports in {out}; {args.jobs} pytest processes at once")

    def build_all(chain: list[Build]) -> None:
        for b in chain:
            if args.no_builds:
                b.ok = True
                b.done.set()
                continue
            b.log = out / f"build-{b.name}.log"
            t0 = time.monotonic()
            b.ok = procs.run(b.argv, b.log) == 0
            b.seconds = time.monotonic() - t0
            say(f"build {b.name}: {'ok' if b.ok else 'FAILED'} in {b.seconds:.0f}s")
            b.done.set()

    slots = Slots(max(1, args.jobs), [t.name for t in run])

    def run_tier(tier: Tier) -> None:
        for need in tier.needs:
            steps[need].done.wait()
        broken = [steps[n] for n in tier.needs if not steps[n].ok]
        if broken or procs.closing:
            n = collected(tier, procs, out)
            tier.rc = 1
            tier.counts = {"passed": 0, "failed": n, "skipped": 0}
            why = ", ".join(f"{b.name} (log: {b.log})" for b in broken) or "stopped"
            tier.summary = f"not run: the build of {why} failed; its {n} tests count as failed"
            return
        log = out / f"{tier.name}.log"
        uses_slot = tier.name not in BESIDE
        with slots.take(tier.name) if uses_slot else contextlib.nullcontext():
            say(f"{tier.name}: started")
            t0 = time.monotonic()
            tier.rc = procs.run(tier.argv, log, tier.env)
            tier.seconds = time.monotonic() - t0
        tier.summary = last_line(log)
        tier.counts = counts(out / f"{tier.name}.xml")
        say(f"{tier.name}: exit {tier.rc} in {tier.seconds:.0f}s: {tier.summary}")

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    builders = [
        threading.Thread(target=build_all, args=(chain,), name=f"builds-{i}", daemon=True)
        for i, chain in enumerate(chains)
    ]
    threads = [threading.Thread(target=run_tier, args=(t,), name=t.name, daemon=True) for t in run]
    try:
        for builder in builders:
            builder.start()
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=300)
                if t.is_alive():
                    busy = [x.name for x in threads if x.is_alive()]
                    say(f"{time.monotonic() - started:.0f}s: waiting on {', '.join(busy)}")
        for builder in builders:
            builder.join()
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        procs.close()
    return report(run, steps, out, started, narrowed=bool(extra))


def report(
    run: list[Tier], steps: dict[str, Build], out: Path, started: float, narrowed: bool
) -> int:
    for tier in run:
        log = out / f"{tier.name}.log"
        print(f"\n{'=' * 30} {tier.name}: its log {'=' * 30}", flush=True)
        print(log.read_text(errors="replace") if log.exists() else tier.summary, flush=True)
    for b in steps.values():
        if not b.ok and b.log is not None:
            print(f"\n{'=' * 30} build {b.name} FAILED: the end of {b.log} {'=' * 30}")
            print("\n".join(b.log.read_text(errors="replace").splitlines()[-60:]))
    print(f"\n{'=' * 30} summary {'=' * 30}")
    for b in steps.values():
        if b.log is not None:
            print(f"build {b.name:<13} {'ok' if b.ok else 'FAILED':<7} {b.seconds:6.0f}s")
    failed_tiers = []
    ran_tests = False
    for tier in run:
        empty = tier.rc == 5
        ran_tests = ran_tests or (tier.rc not in (None, 5) and tier.name != "lint")
        bad = tier.rc not in (0, 5) or (empty and not narrowed)
        if empty and not narrowed:
            tier.note = " (selected no tests: a tier that must have some)"
        if bad:
            failed_tiers.append(tier.name)
        print(
            f"{tier.name:<17} {'FAILED' if bad else 'ok':<7} {tier.seconds:6.0f}s  "
            f"{tier.summary}{tier.note}"
        )
    total = {key: sum(t.counts.get(key, 0) for t in run) for key in ("passed", "failed", "skipped")}
    wall = time.monotonic() - started
    print(f"wall time {wall / 60:.1f} min; tiers failed: {', '.join(failed_tiers) or 'none'}")
    if not ran_tests:
        failed_tiers.append("(no tier ran a test)")
    if failed_tiers and total["failed"] == 0:
        # a tier that failed without a failed test (lint, an empty tier) still reads as failed
        total["failed"] = len(failed_tiers)
    print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 1 if failed_tiers else 0


if __name__ == "__main__":
    sys.exit(main())
