"""Stand-ins for the outside world, for the demo, the tests and the benchmarks; never imported
by the service itself (checked by the import contracts in pyproject.toml).

``apiserver``: a simulated Kubernetes API server for Events with fault injection; ``workload``:
a realistic mix of Events to write into it (``Workload``, the one Event writer);
``natsserver``: a real ``nats-server -js`` started on a loopback port with its own store;
``kubeconfig``: a kubeconfig for an API server; ``waiting``: ``eventually``, the one wait
helper (tests/support.py re-exports these for the tests).
"""

from bridge.sim.apiserver import Faults, RequestRecord, SimApiServer
from bridge.sim.natsserver import NatsServer
from bridge.sim.workload import Workload, WorkloadStats, make_event, run_workload

__all__ = [
    "Faults",
    "NatsServer",
    "RequestRecord",
    "SimApiServer",
    "Workload",
    "WorkloadStats",
    "make_event",
    "run_workload",
]
