"""The remediation worker on the runtime (``k8s_event_consumer.runtime``): its Kubernetes
connection, its bucket of handled ids beside the durable, then each message acted on by the
``Worker`` (one at a time: what is not acked comes again to the next worker)."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client as NATS

from k8s_event_common.kube.errors import KubeConfigError
from k8s_event_consumer import runtime
from k8s_event_consumer.consuming import Consumer, Handlers
from k8s_event_consumer.remediation.kube import Kube
from k8s_event_consumer.remediation.settings import Settings
from k8s_event_consumer.remediation.worker import COUNTERS, Worker
from k8s_event_consumer.seen import KVSeen, Seen


class Program(runtime.Subscriber):
    """The remediation worker: ``k8s-event-remediation``."""

    name = "remediation"
    counters = COUNTERS
    seen: KVSeen | None = None

    async def setup(self) -> None:
        cfg: Settings = self.settings
        self.metrics.read(
            "seen_forged_total",
            "entries of the bucket of handled ids whose value this program did not write "
            "(JetStream's answer sent into the bucket): not counted as handled, overwritten",
            lambda: {(): float(self.seen.forged if self.seen else 0)},
            kind="counter",
        )
        self.kube = Kube(cfg.kubernetes)
        if not self.ctx.provision:  # a provision run talks to NATS only
            try:
                await self.kube.connect()
            except Exception as exc:  # a kubeconfig that can not be used: nothing to retry
                code = runtime.EXIT_CONFIG if isinstance(exc, KubeConfigError) else 1
                why = f"{type(exc).__name__}: {exc}"
                raise runtime.Unusable(why, code, "kubernetes_config_unusable") from exc
        self.worker = Worker(cfg, self.kube, clock=self.clock, metrics=self.metrics)

    def status(self) -> dict[str, Any]:
        cfg: Settings = self.settings
        out: dict[str, Any] = {
            "cluster": cfg.kubernetes.cluster,
            "dry_run": cfg.remediation.dry_run,
            "bucket": cfg.nats.seen_bucket,
        }
        if hasattr(self, "worker"):
            out.update(vars(self.worker.counts))
        return out

    async def provide(self, nc: NATS) -> Seen:
        self.seen = await KVSeen.open(nc, self.settings.nats.seen_bucket, clock=self.clock)
        return self.seen

    async def consume(self, consumer: Consumer) -> None:
        await consumer.run(Handlers(on_event=self.worker.on_event))

    async def close(self) -> None:
        await self.kube.close()
