"""The one command line of the subscribers: ``<prog> [run|check-config|provision] [--config
FILE]``.

A program is a package with a ``settings`` module (``load``, ``CONFIG_FILE_ENV``) and a
``running`` module whose ``Program`` is its ``runtime.Subscriber``. A config error prints one
line (``<prog>: <what is wrong>``) and exits 2; ``check-config`` prints the effective config,
secrets redacted; ``run`` and ``provision`` run the program on the runtime, which sets up the
logs (``running`` and ``k8s_event_consumer.runtime`` are imported only then: ``check-config``
loads nothing of the running service)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

import yaml

from k8s_event_consumer.configuring import ConfigError, redacted

EXIT_CONFIG = 2


def main(
    argv: Sequence[str] | None, *, prog: str, package: str, description: str, provision: str
) -> int:
    """``package``: the program's (``k8s_event_consumer.otlp``); ``provision``: what
    ``provision`` makes (the help's words)."""
    settings = importlib.import_module(f"{package}.settings")
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
    program = importlib.import_module(f"{package}.running").Program
    from k8s_event_consumer import runtime

    return asyncio.run(runtime.serve(program, cfg, provision=args.command == "provision"))
