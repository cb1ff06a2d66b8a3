"""The command line the alerting and OTLP subscribers share:
``<prog> [run|check-config|provision] [--config FILE]``.

A config error prints one line (``<prog>: <what is wrong>``) and exits 2; ``check-config``
prints the effective config, secrets redacted; ``run`` and ``provision`` set up the logs and
hand the settings to the subscriber's ``serve`` (imported only then: ``check-config`` loads
nothing of the running service)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

import yaml

from k8s_event_consumer import logs
from k8s_event_consumer.configuring import ConfigError

EXIT_CONFIG = 2

Serve = Callable[[Any, bool], Coroutine[Any, Any, int]]


class SettingsModule(Protocol):
    """A subscriber's settings module (``k8s_event_consumer.<name>.settings``)."""

    CONFIG_FILE_ENV: str

    def load(self, path: str | None = None) -> Any: ...

    def redacted(self, settings: Any) -> Mapping[str, Any]: ...


def main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    provision: str,
    settings: SettingsModule,
    serve: Callable[[], Serve],
) -> int:
    """``provision``: what ``provision`` makes (the help's words); ``serve``: returns the
    subscriber's ``serve(cfg, provision)``, imported when called."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument(
        "command",
        nargs="?",
        default="run",
        choices=["run", "check-config", "provision"],
        help="run (default); check-config: validate and print the effective config; "
        f"provision: make {provision} (an operator's credentials)",
    )
    p.add_argument("--config", help=f"YAML config file (or {settings.CONFIG_FILE_ENV})")
    args = p.parse_args(argv)
    try:
        cfg = settings.load(args.config)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "check-config":
        print(yaml.safe_dump(settings.redacted(cfg), sort_keys=False), end="")
        return 0
    logs.setup(cfg.log.level, cfg.log.format)
    return asyncio.run(serve()(cfg, args.command == "provision"))
