"""The one command line of the subscribers: ``<prog> [run|check-config|provision] [--config
FILE]``.

A config error prints one line (``<prog>: <what is wrong>``) and exits 2; ``check-config``
prints the effective config, secrets redacted; ``run`` and ``provision`` set up the logs and
run the program on the runtime (``k8s_event_consumer.runtime``, imported only then:
``check-config`` loads nothing of the running service)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from k8s_event_consumer import logs
from k8s_event_consumer.configuring import ConfigError, redacted

if TYPE_CHECKING:
    from k8s_event_consumer.runtime import Subscriber

EXIT_CONFIG = 2


class SettingsModule(Protocol):
    """A subscriber's settings module (``k8s_event_consumer.<name>.settings``)."""

    CONFIG_FILE_ENV: str

    def load(self, path: str | None = None) -> Any: ...


def main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    provision: str,
    settings: SettingsModule,
    program: Callable[[], type[Subscriber]],
) -> int:
    """``provision``: what ``provision`` makes (the help's words); ``program``: returns the
    subscriber's class, imported when called."""
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
        print(yaml.safe_dump(redacted(cfg), sort_keys=False), end="")
        return 0
    cls = program()
    logs.setup(cfg.log.level, cfg.log.format)
    from k8s_event_consumer import runtime

    return asyncio.run(runtime.serve(cls, cfg, provision=args.command == "provision"))
