"""The alerting subscriber: Warning Events of chosen reasons, and the bridge's word that the
control plane is unreachable or that Events may be missing, as Prometheus Alertmanager alerts.

    k8s-event-alerting --config alerting.yaml      (python -m k8s_event_consumer.alerting)

- ``alerts``: the pure state machine (Events and status events → alerts, one per label set);
- ``alertmanager``: the client, POSTing to every Alertmanager's ``/api/v2/alerts``;
- ``running``: the wiring (durable consumer, resend loop, signals); ``http``: the probes and
  ``/metrics``;
- ``settings``: YAML file plus ``ALERTING_<SECTION>__<KEY>`` environment variables.

What it sends and when is described in docs/consumers.md.
"""

from k8s_event_consumer.alerting.alerts import Alert, AlertName, Rules, State

__all__ = ["Alert", "AlertName", "Rules", "State"]
