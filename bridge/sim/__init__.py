"""A simulated Kubernetes API server for Events, with a workload generator and fault injection."""

from bridge.sim.apiserver import Faults, RequestRecord, SimApiServer
from bridge.sim.workload import WorkloadStats, make_event, run_workload

__all__ = ["Faults", "RequestRecord", "SimApiServer", "WorkloadStats", "make_event", "run_workload"]
