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


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def has_go(r: dict[str, Any]) -> bool:
    """Whether the run had the Go reference (runs from before it have no ``goref`` entries:
    their tables keep the layout they were made with)."""
    return any("goref" in x for x in r.get("throughput", []))


def _go_missing(r: dict[str, Any]) -> str:
    """Why a run has no Go reference figures."""
    goref = r.get("goref") or {}
    if goref.get("binary"):
        return "the Go reference failed in every run (see the log)"
    return str(goref.get("error") or "no Go reference binary")


def summarise(r: dict[str, Any]) -> dict[str, Any]:
    runs = r.get("throughput", [])
    bridge = _median([x["events_per_s"] for x in runs])
    ref = _median([x["reference"].get("events_per_s") for x in runs])
    go = _median([x.get("goref", {}).get("events_per_s") for x in runs])
    cpu = _median([x["cpu_s_per_1k"] for x in runs])
    go_cpu = _median([x.get("goref", {}).get("cpu_s_per_1k") for x in runs])
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
        "goref_events_per_s": go,
        "ratio_go": _ratio(bridge, go),
        "ratio_go_per_run": [
            _ratio(x["events_per_s"], x.get("goref", {}).get("events_per_s")) for x in runs
        ],
        "cpu_s_per_1k": cpu,
        "reference_cpu_s_per_1k": _median([x["reference"].get("cpu_s_per_1k") for x in runs]),
        "goref_cpu_s_per_1k": go_cpu,
        # bridge CPU per event / the Go reference's (how many times more it spends)
        "cpu_ratio_go": _ratio(cpu, go_cpu),
        # why there are no Go figures (None: there are, or the run is from before the Go reference)
        "goref_unavailable": _go_missing(r) if has_go(r) and not go else None,
        "other_load_cores": {
            "bridge_runs": [x.get("other_cpu_share") for x in runs],
            "reference_runs": [x["reference"].get("other_cpu_share") for x in runs],
            "goref_runs": [x.get("goref", {}).get("other_cpu_share") for x in runs],
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
    ratio_go = s["ratio_go"]
    if ratio_go is not None:
        go_measured = (
            _f(ratio_go, ".2f") + f"  ({_f(bridge, ',.0f')} / {_f(go, ',.0f')} ev/s; CPU "
            f"{_f(cpu, '.4f')} / {_f(go_cpu, '.4f')} s per 1k, x{_f(s['cpu_ratio_go'], '.1f')})"
        )
    else:
        go_measured = "not run: " + (s["goref_unavailable"] or _go_missing(r))
    target(
        "whole pipeline vs Go reference (same run)",
        ">= 0.80",
        go_measured,
        None if ratio_go is None else ratio_go >= 0.8,
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
        for v in (
            *s["other_load_cores"]["bridge_runs"],
            *s["other_load_cores"]["reference_runs"],
            *s["other_load_cores"]["goref_runs"],
        )
        if v is not None
    ]
    s["noisy"] = bool(loads) and max(loads) > NOISY_CORES
    sources = {x.get("bridge_source") for x in r.get("readyz", {}).get("starts", [])}
    s["bridge_changed_during_run"] = len(sources - {None, ""}) > 1
    return s


def _f(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _go_version(r: dict[str, Any]) -> str:
    """``, Go reference built with go1.x`` (its --version names the toolchain second)."""
    version = (r.get("goref") or {}).get("version") or ""
    parts = version.split()
    return f", Go reference built with {parts[1]}" if len(parts) > 1 else ""


def run_line(x: dict[str, Any]) -> str:
    """One throughput run in a line (``--throughput-only``)."""
    ref, gref = x["reference"], x.get("goref", {})
    go = gref.get("events_per_s")
    if go:
        go_text = (
            f"Go reference {go:,.0f} ev/s, ratio {(x['events_per_s'] or 0) / go:.2f}, "
            f"go cpu {gref.get('cpu_s_per_1k') or 0:.4f} s/1k, "
        )
    else:
        go_text = f"Go reference n/a ({gref.get('unavailable') or 'failed'}), "
    return (
        f"run {x['run']}: bridge {x['events_per_s'] or 0:,.0f} ev/s, "
        f"reference {ref.get('events_per_s') or 0:,.0f} ev/s, ratio "
        f"{(x['events_per_s'] or 0) / (ref.get('events_per_s') or 1):.2f}, {go_text}"
        f"cpu {x['cpu_s_per_1k'] or 0:.3f} s/1k, ref cpu {ref.get('cpu_s_per_1k') or 0:.3f} s/1k, "
        f"peak RSS {x['peak_rss_mb']:.1f} MB"
    )


def medians_line(s: dict[str, Any]) -> str:
    """The medians of the throughput runs in a line (``--throughput-only``)."""
    go = (
        f"Go reference {_f(s['goref_events_per_s'], ',.0f')} ev/s (ratio "
        f"{_f(s['ratio_go'], '.2f')})"
        if s["goref_events_per_s"]
        else "Go reference n/a"
    )
    go_cpu = (
        f", Go reference {_f(s['goref_cpu_s_per_1k'], '.4f')} (bridge "
        f"x{_f(s['cpu_ratio_go'], '.1f')})"
        if s["goref_cpu_s_per_1k"]
        else ""
    )
    return (
        f"median: bridge {_f(s['bridge_events_per_s'], ',.0f')} ev/s, reference "
        f"{_f(s['reference_events_per_s'], ',.0f')} ev/s (ratio {_f(s['ratio'], '.2f')}), {go}; "
        f"cpu s/1k bridge {_f(s['cpu_s_per_1k'], '.4f')}, reference "
        f"{_f(s['reference_cpu_s_per_1k'], '.4f')}{go_cpu}"
    )


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
    go = has_go(r)
    lines += [
        "",
        "Throughput runs (other load: CPU cores used by processes outside the benchmark during "
        + (
            "the bridge / reference / Go reference window)"
            if go
            else "the bridge / reference window)"
        ),
        "",
    ]
    hdr: tuple[str, ...] = (
        "run",
        "bridge ev/s",
        "ref ev/s",
        "ratio",
        *(("go ev/s", "ratio go") if go else ()),
        "cpu s/1k",
        "ref cpu s/1k",
        *(("go cpu s/1k",) if go else ()),
        "peak RSS",
        "RSS after",
        "ready",
        "other load",
    )
    rows2 = [hdr]
    runs = r["throughput"]
    ratios_go = s.get("ratio_go_per_run") or [None] * len(runs)
    for x, ratio, ratio_go in zip(runs, s["ratio_per_run"], ratios_go, strict=True):
        ref, gref = x["reference"], x.get("goref", {})
        loads = [x.get("other_cpu_share"), ref.get("other_cpu_share")]
        if go:
            loads.append(gref.get("other_cpu_share"))
        rows2.append(
            (
                str(x["run"]),
                _f(x["events_per_s"], ",.0f"),
                _f(ref.get("events_per_s"), ",.0f"),
                _f(ratio, ".2f"),
                *((_f(gref.get("events_per_s"), ",.0f"), _f(ratio_go, ".2f")) if go else ()),
                _f(x["cpu_s_per_1k"], ".3f"),
                _f(ref.get("cpu_s_per_1k"), ".3f"),
                *((_f(gref.get("cpu_s_per_1k"), ".4f"),) if go else ()),
                _f(x["peak_rss_mb"], ".1f") + " MB",
                _f(x["rss_after_mb"], ".1f") + " MB",
                _f(x["ready_s"], ".2f") + " s",
                " / ".join(_f(v, ".2f") for v in loads),
            )
        )
    widths = [max(len(cells[i]) for cells in rows2) for i in range(len(hdr))]
    for i, cells in enumerate(rows2):
        lines.append("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))
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
        f"{_f(s['reference_cpu_s_per_1k'], '.3f')} s per 1k"
        + (
            f", Go reference {_f(s.get('goref_cpu_s_per_1k'), '.4f')} s per 1k (bridge "
            f"x{_f(s.get('cpu_ratio_go'), '.1f')})"
            if go
            else ""
        ),
        "other load on the machine (CPU cores used by processes outside the benchmark) - "
        "bridge runs: "
        + ", ".join(_f(v, ".2f") for v in s["other_load_cores"]["bridge_runs"])
        + "; reference runs: "
        + ", ".join(_f(v, ".2f") for v in s["other_load_cores"]["reference_runs"])
        + (
            "; Go reference runs: "
            + ", ".join(_f(v, ".2f") for v in s["other_load_cores"].get("goref_runs", []))
            if go
            else ""
        )
        + f"; latency phase: {_f(s['other_load_cores']['latency_phase'], '.2f')}",
        f"machine: {r['machine']['cores']} cores, Python {r['machine']['python']}, uvloop "
        f"{'on' if r['machine']['uvloop'] else 'off'}{_go_version(r)}; benchmark took "
        f"{r['duration_s']:.0f} s",
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
    gor = [x.get("goref", {}).get("events_per_s") or 0 for x in runs]
    if has_go(r):
        w = 0.27
        ax.bar([i - w for i in xs], b, w, label="bridge (whole pipeline)", color="#1f77b4")
        ax.bar(list(xs), ref, w, label="Python reference", color="#bbbbbb")
        ax.bar([i + w for i in xs], gor, w, label="Go reference", color="#2ca02c")
        for i, (vb, vr, vg) in enumerate(zip(b, ref, gor, strict=True)):
            for dx, v in ((-w, vb), (0.0, vr), (w, vg)):
                ax.text(i + dx, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
            ratios = [f"py {vb / vr:.2f}" if vr else "", f"go {vb / vg:.2f}" if vg else ""]
            ax.text(i, max(vb, vr, vg) * 1.08, "  ".join(filter(None, ratios)), ha="center",
                    fontsize=8)  # fmt: skip
    else:
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
    ax.set_ylim(0, max([*b, *ref, *gor, 20_000]) * 1.35)
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


def _markdown_runs_go(r: dict[str, Any]) -> list[str]:
    """The throughput runs with the Go reference's columns, and a row of medians."""
    s = r["summary"]
    out = [
        "| run | bridge ev/s | reference ev/s | ratio | Go reference ev/s | ratio Go "
        "| bridge CPU s/1k | reference CPU s/1k | Go reference CPU s/1k | peak RSS | RSS after "
        "| /readyz | other load (cores) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    runs = r["throughput"]
    for x, ratio, ratio_go in zip(runs, s["ratio_per_run"], s["ratio_go_per_run"], strict=True):
        ref, gref = x["reference"], x.get("goref", {})
        out.append(
            f"| {x['run']} | {_f(x['events_per_s'], ',.0f')} | "
            f"{_f(ref.get('events_per_s'), ',.0f')} | {_f(ratio, '.2f')} | "
            f"{_f(gref.get('events_per_s'), ',.0f')} | {_f(ratio_go, '.2f')} | "
            f"{_f(x['cpu_s_per_1k'], '.3f')} | {_f(ref.get('cpu_s_per_1k'), '.3f')} | "
            f"{_f(gref.get('cpu_s_per_1k'), '.4f')} | {_f(x['peak_rss_mb'], '.1f')} MB | "
            f"{_f(x['rss_after_mb'], '.1f')} MB | {_f(x['ready_s'], '.2f')} s | "
            f"{_f(x.get('other_cpu_share'), '.2f')} / {_f(ref.get('other_cpu_share'), '.2f')} "
            f"/ {_f(gref.get('other_cpu_share'), '.2f')} |"
        )
    out.append(
        f"| median | {_f(s['bridge_events_per_s'], ',.0f')} | "
        f"{_f(s['reference_events_per_s'], ',.0f')} | {_f(s['ratio'], '.2f')} | "
        f"{_f(s['goref_events_per_s'], ',.0f')} | {_f(s['ratio_go'], '.2f')} | "
        f"{_f(s['cpu_s_per_1k'], '.3f')} | {_f(s['reference_cpu_s_per_1k'], '.3f')} | "
        f"{_f(s['goref_cpu_s_per_1k'], '.4f')} | | | | |"
    )
    return out


def markdown(r: dict[str, Any]) -> str:
    """The results as Markdown tables, for docs/performance.md."""
    s = r["summary"]
    out = ["| target (issue 4) | want | measured | |", "|---|---|---|---|"]
    for t in s["targets"]:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        out.append(f"| {t['target']} | {t['want']} | {t['measured']} | {verdict} |")
    if has_go(r):
        out += ["", *_markdown_runs_go(r)]
    else:
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
        f"{'on' if m['uvloop'] else 'off'}{_go_version(r)}, {m['nats_server']}, commit "
        f"{m['git_commit']}"
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
