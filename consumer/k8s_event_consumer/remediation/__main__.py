"""``python -m k8s_event_consumer.remediation [run|check-config|provision] --config FILE``
(the ``k8s-event-remediation`` command; ``k8s_event_consumer.commands``): the remediation
worker (worker.py). ``provision`` makes its durable and its bucket with exactly their shapes
(run with an operator's NATS credentials) and exits."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from k8s_event_consumer import commands
from k8s_event_consumer.remediation import settings

if TYPE_CHECKING:
    from k8s_event_consumer.runtime import Subscriber


def _program() -> type[Subscriber]:
    from k8s_event_consumer.remediation.running import Program

    return Program


def main(argv: Sequence[str] | None = None) -> int:
    return commands.main(
        argv,
        prog="k8s-event-remediation",
        description="Act on the API server on Events from k8s-event-bridge's stream.",
        provision="the durable and the bucket with exactly their config",
        settings=settings,
        program=_program,
    )


if __name__ == "__main__":
    sys.exit(main())
