"""``python -m k8s_event_consumer.digests [run|check-config|provision] --config FILE``
(the ``k8s-event-digests`` command; ``k8s_event_consumer.commands``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from k8s_event_consumer import commands


def main(argv: Sequence[str] | None = None) -> int:
    return commands.main(
        argv,
        prog="k8s-event-digests",
        package="k8s_event_consumer.digests",
        description="Write one digest per series of Kubernetes Events per window, from "
        "k8s-event-bridge's stream into a stream of their own.",
        provision="the digests' stream with exactly its config",
    )


if __name__ == "__main__":
    sys.exit(main())
