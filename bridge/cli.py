"""The command line: ``run``, ``check-config``, ``tail``, ``provision``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

import yaml

from bridge import __version__, logs, settings
from bridge.errors import EXIT_CONFIG, ConfigError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="k8s-event-bridge",
        description="Watch Kubernetes Events and publish them as CloudEvents to NATS JetStream.",
    )
    p.add_argument("--version", action="version", version=f"k8s-event-bridge {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the service")
    run.add_argument("--config", help="YAML config file (or BRIDGE_CONFIG_FILE)")
    check = sub.add_parser("check-config", help="validate and print the effective config")
    check.add_argument("--config", help="YAML config file (or BRIDGE_CONFIG_FILE)")
    check.add_argument(
        "--rbac",
        action="store_true",
        help="print the ClusterRole the configuration needs beyond deploy/'s (enrich), not "
        "the config",
    )
    tail = sub.add_parser("tail", help="print the stream's events, one readable line each")
    tail.add_argument("--config", help="YAML config file (or BRIDGE_CONFIG_FILE)")
    tail.add_argument("--subject", help="subject filter (default: from the filters below)")
    start = tail.add_mutually_exclusive_group()
    start.add_argument("--all", action="store_true", help="from the start of the stream")
    start.add_argument(
        "--since", help="from a time on: a duration ago (30s, 10m, 2h, 1d) or an RFC 3339 time"
    )
    start.add_argument(
        "--from-seq",
        type=_sequence,
        metavar="N",
        help="from the stream's sequence number N on (a digest's seq N-M: its versions)",
    )
    tail.add_argument(
        "--to-seq",
        type=_sequence,
        metavar="M",
        help="stop after the stream's sequence number M, or at the stream's end if it ends "
        "before (reads every subject, the filters decide; from the start unless --from-seq)",
    )
    tail.add_argument(
        "--digests",
        action="store_true",
        help="the digests (nats.digest_stream: one per series of Events per window), not the "
        "Events",
    )
    tail.add_argument(
        "--at-least",
        type=_sequence,
        metavar="N",
        help="with --digests: only digests of at least N occurrences",
    )
    tail.add_argument("--count", type=int, help="stop after printing this many")
    for flag, what in (
        ("--namespace", "namespace"),
        ("--reason", "reason"),
        ("--kind", "involvedObject kind"),
    ):
        tail.add_argument(
            flag, action="append", default=[], help=f"only Events of this {what} (repeatable)"
        )
    tail.add_argument(
        "--type",
        action="append",
        default=[],
        type=str.lower,
        choices=["normal", "warning"],
        help="only Events of this type (repeatable)",
    )
    tail.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="only Events whose NAME is VALUE: a placeholder of nats.subject_template or an "
        "extension of enrich, e.g. team=payments (repeatable; one NAME's values are or-ed)",
    )
    tail.add_argument("--json", action="store_true", help="one JSON CloudEvent per line")
    tail.add_argument(
        "--color", choices=["auto", "always", "never"], default="auto", help="default: auto"
    )
    prov = sub.add_parser(
        "provision",
        help="create the stream and the buckets with exactly their shapes (an operator's NATS "
        "credentials); idempotent, names each difference of an existing one",
    )
    prov.add_argument("--config", help="YAML config file (or BRIDGE_CONFIG_FILE)")
    prov.add_argument(
        "--update",
        action="store_true",
        help="change an existing one that differs, where JetStream lets the keys change",
    )
    prov.add_argument(
        "--seen-bucket",
        action="append",
        metavar="BUCKET",
        help="a subscriber's bucket of handled ids (repeatable; default: k8s_event_remediation)",
    )
    # the demo left the product (it runs on the simulator, a distribution of its own): say where
    sub.add_parser(
        "demo", help="moved: `make demo`, or k8s-event-bridge-demo (k8s-event-bridge-sim)"
    )
    return p


def _sequence(text: str) -> int:
    """A positive whole number (argparse names the option when it is not one)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not 1 or more")
    return n


DEMO_MOVED = (
    "k8s-event-bridge: the demo is not part of the bridge: run `make demo` in the repository, "
    "or `k8s-event-bridge-demo` with the k8s-event-bridge-sim package (sim/) installed"
)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        print(DEMO_MOVED, file=sys.stderr)
        return EXIT_CONFIG
    try:
        cfg = settings.load(args.config)
    except ConfigError as exc:
        print(f"k8s-event-bridge: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "check-config":
        if args.rbac:
            from bridge import access

            print(yaml.safe_dump(access.cluster_role(cfg), sort_keys=False), end="")
            return 0
        print(yaml.safe_dump(settings.redacted(cfg), sort_keys=False), end="")
        return 0
    logs.setup(cfg.log.level, cfg.log.format)
    if args.command == "provision":
        from bridge.jetstream import streams

        seen = args.seen_bucket if args.seen_bucket is not None else streams.SEEN_BUCKETS
        try:
            return asyncio.run(
                streams.provision(cfg.nats, cfg.checkpoint.bucket, seen, update=args.update)
            )
        except ConfigError as exc:
            print(f"k8s-event-bridge: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    if args.command == "tail":
        from bridge.jetstream import tailing

        try:
            since = tailing.parse_since(args.since) if args.since else None
            if args.digests:
                where = tailing.parse_where(
                    args.where, tailing.digest_where_names(), tailing.DIGEST_UNKNOWN
                )
            else:
                where = tailing.parse_where(args.where, tailing.where_names(cfg))
            tailing.check_range(args.from_seq, args.to_seq, args.subject)
            if args.to_seq is not None and since is not None:
                raise ValueError("--to-seq goes with --from-seq or --all, not --since")
            if args.at_least is not None and not args.digests:
                raise ValueError("--at-least counts a digest's occurrences: add --digests")
        except ValueError as exc:
            print(f"k8s-event-bridge: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        filters = tailing.Filters(
            namespaces=frozenset(args.namespace),
            reasons=frozenset(args.reason),
            kinds=frozenset(args.kind),
            types=frozenset(args.type),
            where=where,
        )
        try:
            return asyncio.run(
                tailing.tail(
                    cfg,
                    args.subject,
                    # a bounded read without a start reads from the stream's start
                    all_=args.all or (args.to_seq is not None and args.from_seq is None),
                    count=args.count,
                    filters=filters,
                    since=since,
                    as_json=args.json,
                    color=args.color,
                    from_seq=args.from_seq,
                    to_seq=args.to_seq,
                    digests_=args.digests,
                    at_least=args.at_least or 0,
                )
            )
        except KeyboardInterrupt:
            return 0
    from bridge import app

    return _run_loop(app.serve(cfg))


def _run_loop(coro: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop when it is installed (``pip install uvloop``), else on asyncio's loop."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return asyncio.run(coro)
    return int(uvloop.run(coro))


if __name__ == "__main__":
    sys.exit(main())
