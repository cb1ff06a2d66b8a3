"""The benchmark's results: targets of issue 4 next to the measured values, a table on stdout,
JSON and a PNG chart in ``bench/results/``. The targets are reported, never enforced."""

from __future__ import annotations

import datetime
import shutil
import statistics
from pathlib import Path
from typing import Any

import msgspec

FLAT_SPREAD = 0.10  # peak RSS across runs: "flat" = max within 10 % of min
BOUNDED_GROWTH_MB = 5.0  # outage: RSS may not grow more than this over its second half
NOISY_CORES = 0.25  # other processes used more than this during a measured window


def _median(values: list[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return statistics.median(vs) if vs else None


def summarise(r: dict[str, Any]) -> dict[str, Any]:
    runs = r.get("throughput", [])
    bridge = _median([x["events_per_s"] for x in runs])
    ref = _median([x["reference"].get("events_per_s") for x in runs])
    peaks = [x["peak_rss_mb"] for x in runs]
    lat = r.get("latency", {})
    out = r.get("outage", {})
    ready = r.get("readyz", {})
    n = r["parameters"]["events"]
    s = {
        "events_per_run": n,
        "bridge_events_per_s": bridge,
        "reference_events_per_s": ref,
        "ratio": bridge / ref if bridge and ref else None,
        "ratio_per_run": [
            (x["events_per_s"] / x["reference"]["events_per_s"])
            if x["events_per_s"] and x["reference"].get("events_per_s")
            else None
            for x in runs
        ],
        "cpu_s_per_1k": _median([x["cpu_s_per_1k"] for x in runs]),
        "reference_cpu_s_per_1k": _median([x["reference"].get("cpu_s_per_1k") for x in runs]),
        "other_load_cores": {
            "bridge_runs": [x.get("other_cpu_share") for x in runs],
            "reference_runs": [x["reference"].get("other_cpu_share") for x in runs],
            "latency_phase": lat.get("other_cpu_share"),
        },
        "peak_rss_mb": peaks,
        "peak_rss_spread": (max(peaks) / min(peaks) - 1) if peaks and min(peaks) > 0 else None,
        "rss_after_mb": [x["rss_after_mb"] for x in runs],
        "all_stored": all(x["stored_in_stream"] == x["events"] for x in runs),
        "publish_p50_ms": lat.get("publish_p50_ms"),
        "publish_p99_ms": lat.get("publish_p99_ms"),
        "e2e_p50_ms": lat.get("e2e_p50_ms"),
        "e2e_p99_ms": lat.get("e2e_p99_ms"),
        "readyz_median_s": ready.get("median_s"),
        "readyz_max_s": ready.get("max_s"),
        "outage_rss_before_mb": out.get("rss_before_mb"),
        "outage_max_rss_mb": out.get("max_rss_during_mb"),
        "outage_max_rss_recovery_mb": out.get("max_rss_recovery_mb"),
        "outage_growth_second_half_mb": out.get("rss_growth_second_half_mb"),
        "outage_max_queue_depth": out.get("max_queue_depth"),
        "outage_exactly_once": (
            out.get("missing") == 0 and out.get("duplicates") == 0 if out else None
        ),
    }
    targets = []

    def target(name: str, want: str, got: str, ok: bool | None) -> None:
        targets.append({"target": name, "want": want, "measured": got, "pass": ok})

    ratio = s["ratio"]
    target(
        "whole pipeline vs reference (same run)",
        ">= 0.80",
        _f(ratio, ".2f") + f"  ({_f(bridge, ',.0f')} / {_f(ref, ',.0f')} ev/s)",
        None if ratio is None else ratio >= 0.8,
    )
    target(
        "events/s end to end (record)",
        ">= 20,000",
        _f(bridge, ",.0f"),
        None if bridge is None else bridge >= 20_000,
    )
    target(
        f"p99 publish latency at {lat.get('rate_target', 1000):,.0f} ev/s",
        "< 10 ms",
        _f(s["publish_p99_ms"], ".2f") + " ms (histogram, interpolated)",
        None if s["publish_p99_ms"] is None else s["publish_p99_ms"] < 10,
    )
    target(
        f"peak RSS at {n:,} events",
        "< 100 MB",
        " / ".join(_f(p, ".1f") for p in peaks) + " MB",
        bool(peaks) and max(peaks) < 100,
    )
    spread = s["peak_rss_spread"]
    target(
        "peak RSS flat across runs",
        f"max <= min + {FLAT_SPREAD:.0%}",
        f"spread {_f(None if spread is None else spread * 100, '.1f')} %",
        None if spread is None else spread <= FLAT_SPREAD,
    )
    growth = s["outage_growth_second_half_mb"]
    target(
        f"memory bounded in a {out.get('seconds', 60):.0f} s NATS outage at "
        f"{out.get('rate', 2000):,.0f} ev/s",
        f"flat (< {BOUNDED_GROWTH_MB:.0f} MB growth in 2nd half)",
        f"{_f(s['outage_rss_before_mb'], '.1f')} -> max {_f(s['outage_max_rss_mb'], '.1f')} MB, "
        f"2nd half +{_f(growth, '.1f')} MB, queue <= {_f(s['outage_max_queue_depth'], '.0f')}",
        None if growth is None else growth < BOUNDED_GROWTH_MB,
    )
    target(
        "first /readyz after start",
        "< 2 s",
        f"median {_f(s['readyz_median_s'], '.2f')} s, max {_f(s['readyz_max_s'], '.2f')} s",
        None if s["readyz_median_s"] is None else s["readyz_median_s"] < 2,
    )
    target(
        "every version exactly once (outage + latency phases)",
        "0 missing, 0 duplicates",
        f"{out.get('missing')} missing, {out.get('duplicates')} duplicates of "
        f"{out.get('checked_versions')}",
        s["outage_exactly_once"],
    )
    s["targets"] = targets
    loads = [
        v
        for v in (*s["other_load_cores"]["bridge_runs"], *s["other_load_cores"]["reference_runs"])
        if v is not None
    ]
    s["noisy"] = bool(loads) and max(loads) > NOISY_CORES
    sources = {x.get("bridge_source") for x in r.get("readyz", {}).get("starts", [])}
    s["bridge_changed_during_run"] = len(sources - {None, ""}) > 1
    return s


def _f(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def table(r: dict[str, Any]) -> str:
    s = r["summary"]
    lines = ["", "Targets (issue 4) - reported, not enforced", ""]
    if s.get("bridge_changed_during_run"):
        lines += [
            "NOTE: bridge/'s sources changed between two starts of this run (someone edited them "
            "meanwhile): the runs did not all measure the same code (see 'bridge_source').",
            "",
        ]
    if s.get("noisy"):
        lines += [
            f"NOTE: other processes used more than {NOISY_CORES} of a core during a measured "
            "window (see 'other load' below): rates and ratios of this run are disturbed.",
            "",
        ]
    rows = [("target", "want", "measured", "")]
    for t in s["targets"]:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        rows.append((t["target"], t["want"], t["measured"], verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for i, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += [
        "",
        "Throughput runs (other load: CPU cores used by processes outside the benchmark during "
        "the bridge / reference window)",
        "",
    ]
    hdr = (
        "run",
        "bridge ev/s",
        "ref ev/s",
        "ratio",
        "cpu s/1k",
        "ref cpu s/1k",
        "peak RSS",
        "RSS after",
        "ready",
        "other load",
    )
    rows2 = [hdr]
    for x, ratio in zip(r["throughput"], s["ratio_per_run"], strict=True):
        ref = x["reference"]
        rows2.append(
            (
                str(x["run"]),
                _f(x["events_per_s"], ",.0f"),
                _f(ref.get("events_per_s"), ",.0f"),
                _f(ratio, ".2f"),
                _f(x["cpu_s_per_1k"], ".3f"),
                _f(ref.get("cpu_s_per_1k"), ".3f"),
                _f(x["peak_rss_mb"], ".1f") + " MB",
                _f(x["rss_after_mb"], ".1f") + " MB",
                _f(x["ready_s"], ".2f") + " s",
                _f(x.get("other_cpu_share"), ".2f") + " / " + _f(ref.get("other_cpu_share"), ".2f"),
            )
        )
    widths = [max(len(row[i]) for row in rows2) for i in range(len(hdr))]
    for i, row in enumerate(rows2):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lat = r["latency"]
    lines += [
        "",
        f"Latency at {lat['rate_achieved']:,.0f} ev/s for {lat['seconds']:.0f} s: publish "
        f"p50 {_f(lat['publish_p50_ms'], '.2f')} ms, p99 {_f(lat['publish_p99_ms'], '.2f')} ms "
        f"(bridge histogram, interpolated in buckets); end to end (write into the API server -> "
        f"JetStream subscriber) p50 {_f(lat['e2e_p50_ms'], '.2f')} ms, p99 "
        f"{_f(lat['e2e_p99_ms'], '.2f')} ms, max {_f(lat['e2e_max_ms'], '.1f')} ms",
    ]
    o = r["outage"]
    lines += [
        f"NATS outage {o['seconds']:.0f} s at {o['rate']:,.0f} ev/s ({o['written']:,} written): "
        f"RSS {o['rss_before_mb']:.1f} MB before, max {_f(o['max_rss_during_mb'], '.1f')} MB "
        f"during, queue depth max {_f(o['max_queue_depth'], '.0f')}; while draining after the "
        f"restart max {_f(o.get('max_rss_recovery_mb'), '.1f')} MB (VmHWM "
        f"{_f(o.get('peak_rss_after_mb'), '.1f')} MB); all stored "
        f"{o['recovered_s']:.1f} s after the restart; {o['stored_distinct']:,}/"
        f"{o['checked_versions']:,} versions stored, {o['duplicates']} duplicates",
        f"CPU: bridge {_f(s['cpu_s_per_1k'], '.3f')} s per 1k events, reference "
        f"{_f(s['reference_cpu_s_per_1k'], '.3f')} s per 1k",
        "other load on the machine (CPU cores used by processes outside the benchmark) - "
        "bridge runs: "
        + ", ".join(_f(v, ".2f") for v in s["other_load_cores"]["bridge_runs"])
        + "; reference runs: "
        + ", ".join(_f(v, ".2f") for v in s["other_load_cores"]["reference_runs"])
        + f"; latency phase: {_f(s['other_load_cores']['latency_phase'], '.2f')}",
        f"machine: {r['machine']['cores']} cores, Python {r['machine']['python']}, uvloop "
        f"{'on' if r['machine']['uvloop'] else 'off'}; benchmark took {r['duration_s']:.0f} s",
        "",
    ]
    return "\n".join(lines)


def chart(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    m = r["machine"]
    fig.suptitle(
        f"k8s-event-bridge benchmark, {r['started_at']}  ({m['cores']} cores, Python "
        f"{m['python']}, uvloop {'on' if m['uvloop'] else 'off'}; one run on a noisy machine)",
        fontsize=11,
    )

    ax = axes[0][0]
    runs = r["throughput"]
    xs = range(len(runs))
    w = 0.38
    b = [x["events_per_s"] or 0 for x in runs]
    ref = [x["reference"].get("events_per_s") or 0 for x in runs]
    ax.bar([i - w / 2 for i in xs], b, w, label="bridge (whole pipeline)", color="#1f77b4")
    ax.bar([i + w / 2 for i in xs], ref, w, label="reference pipeline", color="#bbbbbb")
    for i, (vb, vr) in enumerate(zip(b, ref, strict=True)):
        ax.text(i - w / 2, vb, f"{vb:,.0f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + w / 2, vr, f"{vr:,.0f}", ha="center", va="bottom", fontsize=8)
        if vr:
            ax.text(i, max(vb, vr) * 1.08, f"ratio {vb / vr:.2f}", ha="center", fontsize=8)
    ax.axhline(20_000, color="red", lw=0.8, ls="--", label="20k ev/s target")
    ax.set_xticks(list(xs), [f"run {x['run']}" for x in runs])
    ax.set_ylabel("events/s")
    ax.set_ylim(0, max([*b, *ref, 20_000]) * 1.35)
    ax.set_title(f"Throughput, {r['parameters']['events']:,} events per run")
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[0][1]
    o = r["outage"]
    samples = o["samples"]
    t = [s["t"] for s in samples]
    ax.plot(t, [s["rss_mb"] for s in samples], "-o", ms=3, color="#1f77b4", label="bridge RSS")
    ax.axvline(0, color="red", lw=0.8, ls="--")
    restart = next((s["t"] for s in samples if s["phase"] == "recovery"), None)
    if restart is not None:
        ax.axvline(restart, color="green", lw=0.8, ls="--")
    ax.set_xlabel("seconds since nats-server was killed (red) / restarted (green)")
    ax.set_ylabel("RSS (MB)")
    ax.set_ylim(0, max(s["rss_mb"] for s in samples) * 1.3)
    ax2 = ax.twinx()
    ax2.plot(
        t,
        [s["queue_depth"] if s["queue_depth"] is not None else float("nan") for s in samples],
        color="#ff7f0e",
        lw=1,
        label="queue depth",
    )
    ax2.set_ylabel("queue depth (events)")
    ax.set_title(f"NATS outage: {o['seconds']:.0f} s at {o['rate']:,.0f} events/s")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="lower right")

    ax = axes[1][0]
    lat = r["latency"]
    labels = ["p50", "p99"]
    pub = [lat["publish_p50_ms"] or 0, lat["publish_p99_ms"] or 0]
    e2e = [lat["e2e_p50_ms"] or 0, lat["e2e_p99_ms"] or 0]
    ax.bar([i - w / 2 for i in range(2)], pub, w, label="publish (bridge histogram)")
    ax.bar([i + w / 2 for i in range(2)], e2e, w, label="end to end (write -> subscriber)")
    for i in range(2):
        ax.text(i - w / 2, pub[i], f"{pub[i]:.2f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + w / 2, e2e[i], f"{e2e[i]:.2f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(10, color="red", lw=0.8, ls="--", label="10 ms target (publish p99)")
    ax.set_xticks(range(2), labels)
    ax.set_ylabel("ms")
    ax.set_title(f"Latency at a steady {lat['rate_achieved']:,.0f} events/s")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    peaks = [x["peak_rss_mb"] for x in runs]
    after = [x["rss_after_mb"] for x in runs]
    ax.bar([i - w / 2 for i in xs], peaks, w, label="peak RSS (VmHWM)")
    ax.bar([i + w / 2 for i in xs], after, w, label="RSS after the run")
    for i in xs:
        ax.text(i - w / 2, peaks[i], f"{peaks[i]:.1f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + w / 2, after[i], f"{after[i]:.1f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(100, color="red", lw=0.8, ls="--", label="100 MB target")
    ax.set_xticks(list(xs), [f"run {x['run']}" for x in runs])
    ax.set_ylabel("MB")
    ax.set_ylim(0, max([*peaks, 100]) * 1.35)
    ax.set_title("Bridge memory per throughput run")
    ax.legend(fontsize=8, loc="upper left")

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def finish(result: dict[str, Any], out: Path) -> None:
    result["summary"] = summarise(result)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    data = msgspec.json.format(msgspec.json.encode(result), indent=2)
    (out / f"{stamp}.json").write_bytes(data)
    shutil.copyfile(out / f"{stamp}.json", out / "latest.json")
    try:
        chart(result, out / "latest.png")
        png = f", {out / 'latest.png'}"
    except ImportError:
        png = " (no chart: matplotlib is not installed; pip install -e '.[bench]')"
    print(table(result))
    print(f"results: {out / f'{stamp}.json'}, {out / 'latest.json'}{png}")


def markdown(r: dict[str, Any]) -> str:
    """The results as Markdown tables, for docs/performance.md."""
    s = r["summary"]
    out = ["| target (issue 4) | want | measured | |", "|---|---|---|---|"]
    for t in s["targets"]:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        out.append(f"| {t['target']} | {t['want']} | {t['measured']} | {verdict} |")
    out += [
        "",
        "| run | bridge ev/s | reference ev/s | ratio | bridge CPU s/1k | reference CPU s/1k "
        "| peak RSS | RSS after | /readyz | other load (cores) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x, ratio in zip(r["throughput"], s["ratio_per_run"], strict=True):
        ref = x["reference"]
        out.append(
            f"| {x['run']} | {_f(x['events_per_s'], ',.0f')} | "
            f"{_f(ref.get('events_per_s'), ',.0f')} | {_f(ratio, '.2f')} | "
            f"{_f(x['cpu_s_per_1k'], '.3f')} | "
            f"{_f(ref.get('cpu_s_per_1k'), '.3f')} | {_f(x['peak_rss_mb'], '.1f')} MB | "
            f"{_f(x['rss_after_mb'], '.1f')} MB | {_f(x['ready_s'], '.2f')} s | "
            f"{_f(x.get('other_cpu_share'), '.2f')} / {_f(ref.get('other_cpu_share'), '.2f')} |"
        )
    lat, o, m = r["latency"], r["outage"], r["machine"]
    out += [
        "",
        "| other measurements | |",
        "|---|---|",
        f"| publish latency at {lat['rate_achieved']:,.0f} ev/s ({lat['seconds']:.0f} s), "
        f"histogram | p50 {_f(lat['publish_p50_ms'], '.2f')} ms, p99 "
        f"{_f(lat['publish_p99_ms'], '.2f')} ms |",
        f"| end to end (write → JetStream subscriber) | p50 {_f(lat['e2e_p50_ms'], '.2f')} ms, "
        f"p99 {_f(lat['e2e_p99_ms'], '.2f')} ms, max {_f(lat['e2e_max_ms'], '.1f')} ms |",
        f"| /readyz after start ({len(r['readyz']['starts'])} starts) | median "
        f"{r['readyz']['median_s']:.2f} s, max {r['readyz']['max_s']:.2f} s |",
        f"| NATS outage {o['seconds']:.0f} s at {o['rate']:,.0f} ev/s ({o['written']:,} written) "
        f"| RSS {o['rss_before_mb']:.1f} MB before, max {_f(o['max_rss_during_mb'], '.1f')} MB "
        f"during (+{_f(o['rss_growth_second_half_mb'], '.1f')} MB over the 2nd half), queue "
        f"depth max {_f(o['max_queue_depth'], '.0f')} |",
        f"| after the NATS restart | all stored in {o['recovered_s']:.1f} s; RSS max "
        f"{_f(o.get('max_rss_recovery_mb'), '.1f')} MB while draining, "
        f"{_f(o.get('rss_after_mb'), '.1f')} MB after |",
        f"| exactly once (latency + outage phases) | {o['stored_distinct']:,}/"
        f"{o['checked_versions']:,} versions stored, {o['duplicates']} duplicates, "
        f"{o['missing']} missing |",
        f"| machine | {m['cores']} cores ({m['cpu_model']}), Python {m['python']}, uvloop "
        f"{'on' if m['uvloop'] else 'off'}, {m['nats_server']}, commit {m['git_commit']}"
        f"{' + uncommitted bridge/ changes' if m['bridge_uncommitted_changes'] else ''} |",
        f"| other load (cores) in the latency phase | "
        f"{_f(s['other_load_cores']['latency_phase'], '.2f')} |",
        f"| benchmark duration | {r['duration_s']:.0f} s |",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results/latest.json"
    print(markdown(msgspec.json.decode(path.read_bytes())))
