"""What a new test starts from: the small helpers every tier shares, one copy each.

- Events: ``Workload`` (bridge/sim/workload.py) is the one writer of realistic Events, seeded,
  with every version's id in ``ids``; ``Workload(sim)`` writes to the simulated API server
  (the ``sim`` fixture of tests/conftest.py), tests/e2e/writer.py draws the same Events and
  writes them to a real kube-apiserver. Do not write another Event generator.
- Waiting: ``await eventually(check, timeout, what=...)`` until ``check()`` (sync or async)
  is truthy, ``eventually_sync`` without an event loop; never a fixed sleep, never a
  hand-written ``while time.monotonic() < deadline`` loop. A timeout names what it waited for.
- Servers and processes: ``free_port()``, ``write_kubeconfig(path, server, ...)``,
  ``rss_kib(pid)``; the ``nats_server``, ``sim``, ``kubeconfig`` and ``run_bridge`` fixtures
  (tests/conftest.py); the bridge and the subscribers as child processes, configs and reading
  the stream back: tests/integration/harness.py.

The helpers the demo, the benchmark or the soak also need live in ``bridge.sim`` (or
``bench.procs``) and are imported here from there, so each exists once.
"""

from __future__ import annotations

from bench.procs import memory_kb
from bridge.sim.kubeconfig import write_kubeconfig
from bridge.sim.natsserver import free_port
from bridge.sim.waiting import NotMet, eventually, eventually_sync
from bridge.sim.workload import Workload, make_event

__all__ = [
    "NotMet",
    "Workload",
    "eventually",
    "eventually_sync",
    "free_port",
    "make_event",
    "rss_kib",
    "write_kubeconfig",
]


def rss_kib(pid: int) -> int:
    """The resident set size of process ``pid`` in KiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    return memory_kb(pid)["VmRSS"]
