"""``python -m k8s_event_consumer.alerting [run|check-config|provision] --config FILE``
(the ``k8s-event-alerting`` command; ``k8s_event_consumer.commands``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from k8s_event_consumer import commands


def main(argv: Sequence[str] | None = None) -> int:
    return commands.main(
        argv,
        prog="k8s-event-alerting",
        package="k8s_event_consumer.alerting",
        description="Turn the Kubernetes Events of k8s-event-bridge's stream into "
        "Prometheus Alertmanager alerts.",
        provision="the durable with exactly its config",
    )


if __name__ == "__main__":
    sys.exit(main())
