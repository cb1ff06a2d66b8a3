"""Fixtures for the e2e tier: a real etcd + kube-apiserver (see controlplane.py).

The binaries are built (once, cached) by e2e/build-control-plane.sh right after collection when
any e2e test is selected, outside pytest-timeout's per-test limit and with the build's progress
on the terminal. A failed build makes every e2e test fail with the build's output: never a skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.controlplane import ControlPlane, ControlPlaneError, ensure_binaries

_build: dict[str, Any] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if not any(item.get_closest_marker("e2e") for item in session.items):
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    capman = session.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None:
        tr.write_line("e2e: e2e/build-control-plane.sh (a first build takes minutes; cached after)")
    t0 = time.monotonic()
    try:
        if capman is not None:
            with capman.global_and_fixture_disabled():
                _build["bin"] = ensure_binaries(stream=True)
        else:
            _build["bin"] = ensure_binaries()
    except ControlPlaneError as e:
        _build["error"] = e
        if tr is not None:
            tr.write_line(f"e2e: control plane build FAILED: {e}", red=True)
        return
    if tr is not None:
        tr.write_line(f"e2e: binaries in {_build['bin']} ({time.monotonic() - t0:.1f}s)")


def _bin() -> Any:
    if "error" in _build:
        pytest.fail(f"e2e control plane binaries unavailable: {_build['error']}", pytrace=False)
    if "bin" not in _build:
        try:
            _build["bin"] = ensure_binaries()
        except ControlPlaneError as e:
            _build["error"] = e
            pytest.fail(f"e2e control plane binaries unavailable: {e}", pytrace=False)
    return _build["bin"]


@pytest.fixture(scope="session")
def control_plane_factory() -> Iterator[Callable[..., ControlPlane]]:
    """Start more control planes: ``control_plane_factory(event_ttl="5s", watch_cache=False,
    apiserver_args=[...])``; each has its own etcd and is stopped at the end of the session."""
    started: list[ControlPlane] = []

    def make(**kwargs: Any) -> ControlPlane:
        cp = ControlPlane(bin_path=_bin(), **kwargs)
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
