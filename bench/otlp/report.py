"""The comparison's result as Markdown tables (printed, and ``otlp-latest.md``) and files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

NAMES = {
    "A": "collector `k8s_events`",
    "B": "bridge → JetStream → k8s-event-otlp → collector",
}
RUNS = {
    "A": "otelcol with contrib's `k8s_events` receiver, file exporter (one replica; two in the "
    "leader-change phase)",
    "B": "2 bridges (leader election on a Lease), nats-server, k8s-event-otlp, otelcol with the "
    "OTLP receiver and file exporter",
}


def _n(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _s(value: float | None) -> str:
    return "not within the wait" if value is None else f"{value:.1f} s"


def markdown(result: dict[str, Any]) -> str:
    a, b = result["paths"]["A"], result["paths"]["B"]
    truth = result["truth"]
    out = [
        f"{truth['versions']:,} Event versions written ({truth['events']:,} Events, "
        f"{truth['repeats']:,} count bumps) into {len(result['namespaces'])} namespaces at "
        f"{result['plan']['rate']:g}/s; lost = written and never in the path's output, "
        "duplicated = records beyond one per version.",
        "",
        "| phase | versions written | A lost | A duplicated | B lost | B duplicated |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for phase in result["phases"]:
        pa, pb = a["per_phase"][phase], b["per_phase"][phase]
        out.append(
            f"| {phase} | {_n(pa['versions'])} | {_n(pa['lost'])} | {_n(pa['duplicates'])} "
            f"| {_n(pb['lost'])} | {_n(pb['duplicates'])} |"
        )
    out.append(
        f"| **all** | **{_n(truth['versions'])}** | **{_n(a['lost'])}** | "
        f"**{_n(a['duplicates'])}** | **{_n(b['lost'])}** | **{_n(b['duplicates'])}** |"
    )
    out += [
        "",
        "| path | CPU s (whole run) | CPU s per 1k versions | cores at steady load (warm-up) "
        "| peak RSS | steady RSS (median) | processes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key, s in (("A", a), ("B", b)):
        r = s["resources"]
        procs = ", ".join(
            f"{v['processes']} {role} ({v['cpu_s']:.1f} s, ≤{v['peak_rss_mb']:.0f} MB)"
            for role, v in r["processes"].items()
        )
        out.append(
            f"| {key}: {NAMES[key]} | {r['cpu_s']:.1f} | {r['cpu_s_per_1k_versions']:.2f} "
            f"| {r['cores_in_warm_up']:.3f} | {r['peak_rss_mb']:.1f} MB "
            f"| {r['steady_rss_mb']:.1f} MB | {procs} |"
        )
    out += ["", "| check | |", "|---|---|"]
    out.append(
        f"| B's duplicates against docs/consumers.md's bound (a batch of the subscriber per "
        f"SIGKILL of it) | {_n(b['duplicates'])} ≤ {_n(b['duplicate_bound'])}: "
        f"{'within' if b['duplicates'] <= b['duplicate_bound'] else 'OVER'} |"
    )
    out.append(
        f"| B: copies whose `cloudevents.event_id` is not their own version | "
        f"{_n(b['copies_with_another_id'])} |"
    )
    out.append(
        f"| A: written while its collector was down, happened before the restart (never sent, "
        f"by its source) | {_n(a['certain_lost'])}, of them in its output: "
        f"{len(a['certain_lost_in_output'])} |"
    )
    if "restart_lost" in a:
        r = a["restart_lost"]
        out.append(
            "| A's losses in the restart phase: the above / happened while its collector started "
            f"(its receiver watching {r['receiver_started_s']:.2f} s after its process started) "
            "/ written before its SIGKILL (not yet handed on or flushed when it died) / other | "
            f"{_n(r['certain'])} / {_n(r['while_it_started'])} / "
            f"{_n(r['written_before_the_kill'])} / {_n(r['other'])} |"
        )
    out.append(
        f"| records matching no version (other Events) / time mismatches | A "
        f"{_n(a['unmatched'])} / {_n(a['time_mismatches'])}, B {_n(b['unmatched'])} / — |"
    )
    status = ", ".join(f"{k} {v}" for k, v in b["status_records"].items()) or "none"
    out.append(f"| B's status records (the bridge telling the backend) | {status} |")
    for f in result["faults"]:
        parts = []
        for key, what in (
            ("leader_again_after_s", "leader again"),
            ("queue_written_after_s", "queued writes written"),
            ("lease_taken_after_s", "Lease taken"),
            ("A_second_replica_carries_after_s", "A's 2nd replica carries"),
            ("A_carries_again_after_s", "A carries again"),
            ("B_carries_again_after_s", "B carries again"),
        ):
            if key in f:
                parts.append(f"{what} {_s(f[key])}")
        if "subscriber_killed_with_a_batch_in_hand" in f:
            parts.append(
                "k8s-event-otlp killed "
                + ("with" if f["subscriber_killed_with_a_batch_in_hand"] else "without")
                + f" a batch in hand (looked for {f['subscriber_probed_s']:.1f} s, "
                f"costing it {f['subscriber_cpu_while_probed_s']:.2f} CPU s)"
            )
        out.append(
            f"| {f['phase']}: {f['what']} (times from {f['times_from']}) | {'; '.join(parts)} |"
        )
    restarts = ", ".join(f"{r['process']} ({r['exit']})" for r in result["restarts"]) or "none"
    out.append(f"| restarted by the run's kubelet | {restarts} |")
    out.append(
        f"| B's output complete / A's output quiet, after the load stopped | "
        f"{_s(b['output_complete_after_s'])} / {_s(a['output_quiet_after_s'])} |"
    )
    return "\n".join(out) + "\n"


def header(result: dict[str, Any]) -> str:
    m = result.get("machine", {})
    return (
        f"Run of {result.get('started_at', '?')} on commit {m.get('git_commit', '?')}, "
        f"kube-apiserver {result.get('kubernetes', '?')}, otelcol v{result.get('otelcol', '?')}, "
        f"{m.get('cores', '?')} cores ({m.get('cpu_model', '?')}), "
        f"{'quick' if result.get('quick') else 'full'} run of {result.get('duration_s', 0):.0f} s."
    )


def finish(result: dict[str, Any], out: Path) -> None:
    """Print the tables; write ``otlp-<timestamp>.json``, ``otlp-latest.json`` and
    ``otlp-latest.md`` into ``out``."""
    text = header(result) + "\n\n" + markdown(result)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    stamp = result["started_at"].replace("-", "").replace(":", "")[:15].replace("T", "-")
    path = out / f"otlp-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    shutil.copyfile(path, out / "otlp-latest.json")
    (out / "otlp-latest.md").write_text(text)
    print(f"written: {path}, {out / 'otlp-latest.json'}, {out / 'otlp-latest.md'}")
