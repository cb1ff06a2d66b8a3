"""What a new test starts from: the small helpers every tier shares, one copy each.

- Events: ``Workload`` (k8s_event_sim.workload) is the one writer of realistic Events, seeded,
  with every version's id in ``ids``; ``Workload(sim)`` writes to the simulated API server
  (the ``sim`` fixture of tests/conftest.py), tests/e2e/writer.py draws the same Events and
  writes them to a real kube-apiserver. Do not write another Event generator.
- Waiting: ``await eventually(check, timeout, what=...)`` until ``check()`` (sync or async)
  is truthy, ``eventually_sync`` without an event loop; never a fixed sleep, never a
  hand-written ``while time.monotonic() < deadline`` loop. A timeout names what it waited for.
- Servers and processes: ``LeasingSim`` (the simulator with the Lease calls of leader
  election), ``free_port()``, ``write_kubeconfig(path, server, ...)``,
  ``rss_kib(pid)``; the ``nats_server``, ``sim``, ``kubeconfig`` and ``run_bridge`` fixtures
  (tests/conftest.py); the bridge and the subscribers as child processes, configs and reading
  the stream back: tests/integration/harness.py.

The helpers the demo, the benchmark or the soak also need live in ``k8s_event_sim`` (or
``bench.procs``) and are imported here from there, so each exists once.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from bench.procs import memory_kb
from k8s_event_sim.apiserver import SimApiServer, status_response
from k8s_event_sim.kubeconfig import write_kubeconfig
from k8s_event_sim.natsserver import free_port
from k8s_event_sim.waiting import NotMet, eventually, eventually_sync
from k8s_event_sim.workload import Workload, make_event

__all__ = [
    "LeasingSim",
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


_LEASES = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?")


class LeasingSim(SimApiServer):
    """The simulated API server and the three Lease calls of leader election (get, create,
    replace), so that a run with ``leader_election`` publishes ``leader_changed``. The
    simulator sends every path it does not serve to ``_not_found``: Leases are answered there."""

    def __init__(self) -> None:
        super().__init__()
        self.leases: dict[str, dict[str, Any]] = {}
        self.lease_rv = 0

    async def _not_found(self, request: web.Request) -> web.Response:
        m = _LEASES.fullmatch(request.path)
        if m is None:
            return await super()._not_found(request)
        namespace, name = m.groups()
        if request.method == "GET" and name:
            lease = self.leases.get(f"{namespace}/{name}")
            if lease is None:
                return status_response(404, f'leases "{name}" not found', "NotFound")
            return web.json_response(lease)
        body = await request.json()
        key = f"{namespace}/{name or body['metadata']['name']}"
        have = self.leases.get(key)
        if request.method == "POST" and have is not None:
            return status_response(409, "already exists", "AlreadyExists")
        if request.method == "PUT" and (
            have is None
            or body["metadata"].get("resourceVersion") != have["metadata"]["resourceVersion"]
        ):
            return status_response(409, "the object has been modified", "Conflict")
        self.lease_rv += 1
        body["metadata"].update(namespace=namespace, resourceVersion=str(self.lease_rv))
        self.leases[key] = body
        return web.json_response(body, status=201 if request.method == "POST" else 200)
