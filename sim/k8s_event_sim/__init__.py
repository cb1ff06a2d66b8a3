"""Stand-ins for the outside world, for the demo, the tests, the benchmark and the soak: a
distribution of its own (k8s-event-bridge-sim, sim/), never in the bridge's wheel nor its image,
and never imported by the bridge (an import contract in the repository's pyproject.toml).

``apiserver``: a simulated Kubernetes API server for Events with fault injection; ``workload``:
a realistic mix of Events to write into it (``Workload``, the one Event writer);
``natsserver``: a real ``nats-server -js`` started on a loopback port with its own store;
``programs``: the bridge and the subscribers as child processes, the one runner; ``configs``:
their config files, one builder per program; ``readback``: the stream read back; ``tcpproxy``: a
latency-injecting TCP proxy; ``kubeconfig``: a kubeconfig for an API server; ``waiting``:
``eventually``, the one wait helper (tests/support.py re-exports these for the tests);
``demo``: the bridge between an embedded nats-server and a simulated cluster, through a restart,
the stream checked (``make demo``).
"""

from k8s_event_sim.apiserver import Faults, RequestRecord, SimApiServer
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.workload import Workload, WorkloadStats, make_event, run_workload

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
