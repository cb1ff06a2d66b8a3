"""``python -m k8s_event_consumer.otlp [run|check-config|provision] --config FILE``
(the ``k8s-event-otlp`` command)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import yaml

from k8s_event_consumer import logs
from k8s_event_consumer.otlp import settings

EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="k8s-event-otlp",
        description="Send the Kubernetes Events of k8s-event-bridge's stream to an OTLP "
        "endpoint as OpenTelemetry log records.",
    )
    p.add_argument(
        "command",
        nargs="?",
        default="run",
        choices=["run", "check-config", "provision"],
        help="run (default); check-config: validate and print the effective config; "
        "provision: make the durable and the dead-letter stream with exactly their config "
        "(an operator's credentials)",
    )
    p.add_argument("--config", help=f"YAML config file (or {settings.CONFIG_FILE_ENV})")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = settings.load(args.config)
    except settings.ConfigError as exc:
        print(f"k8s-event-otlp: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "check-config":
        print(yaml.safe_dump(settings.redacted(cfg), sort_keys=False), end="")
        return 0
    logs.setup(cfg.log.level, cfg.log.format)
    from k8s_event_consumer.otlp import running

    return asyncio.run(running.serve(cfg, provision=args.command == "provision"))


if __name__ == "__main__":
    sys.exit(main())
