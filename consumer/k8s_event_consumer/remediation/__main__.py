"""``python -m k8s_event_consumer.remediation [run|check-config|provision] --config FILE``
(the ``k8s-event-remediation`` command; ``k8s_event_consumer.commands``): the remediation
worker (worker.py). ``provision`` makes its durable and its bucket with exactly their shapes
(run with an operator's NATS credentials) and exits."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from k8s_event_consumer import commands


def main(argv: Sequence[str] | None = None) -> int:
    return commands.main(
        argv,
        prog="k8s-event-remediation",
        package="k8s_event_consumer.remediation",
        description="Act on the API server on Events from k8s-event-bridge's stream.",
        provision="the durable and the bucket with exactly their config",
    )


if __name__ == "__main__":
    sys.exit(main())
