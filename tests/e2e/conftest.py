"""Fixtures for the e2e tier: a real etcd + kube-apiserver (controlplane.py) and a living
cluster around them (cluster.py), on each Kubernetes version the tier runs on.

Every e2e test runs once per version in ``selected_versions()`` (by default the newest and the
oldest pinned in e2e/versions.env; ``K8S_EVENT_BRIDGE_E2E_VERSIONS=newest`` narrows it): the
session fixture ``kubernetes_version`` is parametrized, and the control-plane fixtures hang off
it, so a test id ends in ``[v1.37.2]`` or ``[v1.32.9]``. The tests on a living cluster (the
``living_cluster`` and ``own_living_cluster`` fixtures) run on ``living_versions()`` only, by
default the newest (``K8S_EVENT_BRIDGE_E2E_LIVING=newest,oldest`` adds the oldest); on the other
versions they are deselected, with a line saying so (docs/e2e.md says why). So is a test marked
``newest`` (``@pytest.mark.newest``: it runs on the newest pinned version only, as the side-by-side
comparison with the OpenTelemetry Collector's receiver does) on every other version.

The binaries are built (once, cached) by e2e/build-control-plane.sh right after collection when
any e2e test is selected: the control plane's (etcd, kube-apiserver, kubectl), and the living
cluster's (kube-scheduler, kube-controller-manager, kwok) for a version whose selected tests
start one. Outside pytest-timeout's per-test limit and with the build's progress on the
terminal. A failed build makes every e2e test fail with the build's output: never a skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.standins.cluster import LivingCluster
from tests.standins.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ensure_binaries,
    living_versions,
    selected_versions,
)
from tests.standins.controlplane import kubernetes_version as version_named

_build: dict[str, Any] = {}
LIVING_FIXTURES = ("living_cluster", "own_living_cluster")


def _version(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("kubernetes_version") if callspec else None


def _living(item: pytest.Item) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in LIVING_FIXTURES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on a living cluster runs on ``living_versions()`` only, a test marked ``newest``
    on the newest version only; deselected elsewhere."""
    living = living_versions()
    newest = version_named("newest")
    keep, drop = [], []
    for item in items:
        version = _version(item)
        e2e = item.get_closest_marker("e2e") and version
        off = e2e and (
            (_living(item) and version not in living)
            or (item.get_closest_marker("newest") and version != newest)
        )
        (drop if off else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            versions = sorted({str(_version(item)) for item in drop})
            tr.write_line(
                f"e2e: {len(drop)} tests deselected on {', '.join(versions)}: on a living cluster "
                f"they run on {', '.join(living)} only, marked newest on {newest} only "
                "(docs/e2e.md)"
            )


def _wanted(session: pytest.Session) -> dict[str, bool]:
    """The versions of the e2e tests selected (their ``kubernetes_version`` parameter), each
    with whether one of them starts a living cluster."""
    out: dict[str, bool] = {}
    for item in session.items:
        if not item.get_closest_marker("e2e"):
            continue
        version = _version(item)
        for v in [version] if version else selected_versions():
            out[v] = out.get(v, False) or _living(item)
    return out


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    wanted = _wanted(session)
    if not wanted:
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    capman = session.config.pluginmanager.get_plugin("capturemanager")
    for version, living in wanted.items():
        if tr is not None:
            tr.write_line(
                f"e2e: e2e/build-control-plane.sh {'--living ' if living else ''}{version} "
                "(a first build takes minutes; cached after)"
            )
        t0 = time.monotonic()
        try:
            if capman is not None:
                with capman.global_and_fixture_disabled():
                    _build[version] = ensure_binaries(version, stream=True, living=living)
            else:
                _build[version] = ensure_binaries(version, living=living)
        except ControlPlaneError as e:
            _build[version] = e
            if tr is not None:
                tr.write_line(f"e2e: build of {version} FAILED: {e}", red=True)
            continue
        if tr is not None:
            tr.write_line(f"e2e: binaries in {_build[version]} ({time.monotonic() - t0:.1f}s)")


def _bin(version: str, living: bool = False) -> Path:
    if version not in _build:
        try:
            _build[version] = ensure_binaries(version, living=living)
        except ControlPlaneError as e:
            _build[version] = e
    found = _build[version]
    if isinstance(found, ControlPlaneError):
        pytest.fail(f"e2e binaries for {version} unavailable: {found}", pytrace=False)
    return found  # type: ignore[no-any-return]


@pytest.fixture(scope="session", params=selected_versions())
def kubernetes_version(request: pytest.FixtureRequest) -> str:
    """The Kubernetes release this test runs on (``v1.37.2``, ...)."""
    return str(request.param)


@pytest.fixture(scope="session")
def control_plane_factory(kubernetes_version: str) -> Iterator[Callable[..., ControlPlane]]:
    """Start more control planes: ``control_plane_factory(event_ttl="5s", watch_cache=False,
    apiserver_args=[...])``; each has its own etcd and is stopped at the end of the session."""
    started: list[ControlPlane] = []

    def make(**kwargs: Any) -> ControlPlane:
        cp = ControlPlane(bin_path=_bin(kubernetes_version), version=kubernetes_version, **kwargs)
        started.append(cp)
        return cp.start()

    yield make
    for cp in started:
        cp.stop()


@pytest.fixture(scope="session")
def control_plane(control_plane_factory: Callable[..., ControlPlane]) -> ControlPlane:
    """The session's shared control plane (event TTL 1h, watch cache on). Tests that kill or
    restart its apiserver/etcd must leave it running (``start_apiserver()``/``start_etcd()``)."""
    return control_plane_factory()


@pytest.fixture(scope="session")
def chart_control_plane(control_plane_factory: Callable[..., ControlPlane]) -> ControlPlane:
    """A control plane for the chart's tests (test_chart_secrets.py, test_chart_subscribers.py),
    with the namespaces the chart installs into (k8s-event-bridge) and the worker acts in
    (team-a, team-b): started once per version for both modules."""
    cp = control_plane_factory()
    for ns in ("k8s-event-bridge", "team-a", "team-b"):
        cp.kubectl("create", "namespace", ns)
    return cp


@pytest.fixture(scope="session")
def living_cluster(kubernetes_version: str) -> Iterator[LivingCluster]:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok with three fake
    nodes (cluster.py), one per version for the session."""
    cluster = LivingCluster(bin_path=_bin(kubernetes_version, True), version=kubernetes_version)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def own_living_cluster(kubernetes_version: str) -> Iterator[LivingCluster]:
    """A living cluster of the test's own, stopped at its end: for a test that takes the
    control plane down while the scheduler, the controllers and kwok are running."""
    cluster = LivingCluster(bin_path=_bin(kubernetes_version, True), version=kubernetes_version)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(autouse=True)
def _control_plane_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that stops the shared apiserver or etcd and fails half-way does not break the
    tests after it: both are started again after every test that used the control plane."""
    yield
    if "control_plane" not in request.fixturenames:
        return
    cp: ControlPlane = request.getfixturevalue("control_plane")
    if cp.etcd.proc is None or cp.etcd.proc.poll() is not None:
        cp.start_etcd()
    if not cp.apiserver.running:
        cp.start_apiserver()
