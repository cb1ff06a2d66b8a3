"""``python -m k8s_event_consumer.otlp [run|check-config|provision] --config FILE``
(the ``k8s-event-otlp`` command; ``k8s_event_consumer.commands``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from k8s_event_consumer import commands


def main(argv: Sequence[str] | None = None) -> int:
    return commands.main(
        argv,
        prog="k8s-event-otlp",
        package="k8s_event_consumer.otlp",
        description="Send the Kubernetes Events of k8s-event-bridge's stream to an OTLP "
        "endpoint as OpenTelemetry log records.",
        provision="the durable and the dead-letter stream with exactly their config",
    )


if __name__ == "__main__":
    sys.exit(main())
