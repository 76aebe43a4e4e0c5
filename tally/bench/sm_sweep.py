"""`tally-bench colocate --sm-sweep`: the trade-off an operator picks a best-effort
SM share from. For each best-effort model, the `priority` policy is run with the
best-effort job confined to a static share of the SMs (10 to 90%), with no share
(the whole device) and with dynamic SM allocation; each run reports the
high-priority p99 against running alone and the best-effort job's normalized
throughput. Every run of a model replays the same requests against the same
baseline (the jobs alone, on the whole device). Sim backend only: deterministic.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from tally.bench.colocate import ColocateConfig, SimRunner, measure_baseline, shared_stats
from tally.bench.workloads import TRAINING_MODELS

DEFAULT_SHARES = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0)


def run_sm_sweep(config: ColocateConfig, models: tuple[str, ...] | None = None,
                 shares: tuple[float, ...] = DEFAULT_SHARES) -> dict:
    """{"config", "shares", "models": {model: {"alone", "rows": [...]}}}; a row's
    `share` is a percentage, "none" (the whole device) or "dynamic"."""
    base = dataclasses.replace(config, policies=("priority",), be_sm_percent=None, dynamic_sm=False)
    base.validate()
    out = {"config": dataclasses.asdict(base), "shares": list(shares), "models": {}}
    for model in models or tuple(TRAINING_MODELS):
        cfg = dataclasses.replace(base, be_model=model)
        baseline = measure_baseline(cfg, SimRunner(cfg))
        runs = [("none", cfg)] + [(share, dataclasses.replace(cfg, be_sm_percent=share)) for share in shares]
        runs.append(("dynamic", dataclasses.replace(cfg, dynamic_sm=True)))
        rows = []
        for share, run_cfg in runs:
            record = SimRunner(run_cfg).run("priority", True, run_cfg.be_jobs, baseline.arrivals)
            stats = shared_stats(run_cfg, baseline, record)
            rows.append({"share": share, "hp_p99_ms": stats["hp_p99_ms"], "hp_p50_ms": stats["hp_p50_ms"],
                         "hp_p99_vs_alone": stats["hp_p99_vs_alone"],
                         "be_normalized_throughput": sum(stats["be_normalized_throughput"]),
                         "system_throughput": stats["system_throughput"], "levers": stats["levers"]})
        out["models"][model] = {"alone": baseline.alone_report(), "rows": rows}
    return out


def _label(share) -> str:
    if isinstance(share, str):
        return {"none": "whole device", "dynamic": "dynamic SM"}[share]
    return f"{share:g}%"


def format_sweep(report: dict) -> str:
    """A markdown table per model."""
    c = report["config"]
    lines = [f"{c['hp_model']} at load {c['load']} ({c['trace']} trace, {c['duration']:g} s, seed {c['seed']}), "
             f"best-effort kernels {'whole' if c['be_transform'] == 'none' else c['be_transform']}, "
             f"policy priority, {c['gpu']} (sim)"]
    for model, result in report["models"].items():
        alone = result["alone"]
        lines += ["", f"{model} (high-priority alone: p50 {alone['hp_p50_ms']:.2f} ms, "
                      f"p99 {alone['hp_p99_ms']:.2f} ms)", "",
                  "| best-effort SM share | hp p99 (ms) | hp p99 / alone | hp p50 (ms) | best-effort throughput "
                  "| system throughput |",
                  "|---|---|---|---|---|---|"]
        for r in result["rows"]:
            lines.append(f"| {_label(r['share'])} | {r['hp_p99_ms']:.2f} | {r['hp_p99_vs_alone']:.3f} | "
                         f"{r['hp_p50_ms']:.2f} | {r['be_normalized_throughput']:.3f} | "
                         f"{r['system_throughput']:.3f} |")
    return "\n".join(lines)


def plot_sm_sweep(report: dict, path: Path | str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for model, result in report["models"].items():
        static = [r for r in result["rows"] if isinstance(r["share"], float)]
        xs = [r["be_normalized_throughput"] for r in static]
        ys = [r["hp_p99_vs_alone"] for r in static]
        (line,) = ax.plot(xs, ys, marker="o", label=f"{model}: static share")
        for r, x, y in zip(static, xs, ys, strict=True):
            ax.annotate(f"{r['share']:g}%", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        for r in result["rows"]:
            if r["share"] == "none":
                ax.plot(r["be_normalized_throughput"], r["hp_p99_vs_alone"], marker="s", color=line.get_color(),
                        linestyle="none", label=f"{model}: whole device")
            elif r["share"] == "dynamic":
                ax.plot(r["be_normalized_throughput"], r["hp_p99_vs_alone"], marker="*", markersize=13,
                        color=line.get_color(), linestyle="none", label=f"{model}: dynamic SM")
    ax.axhline(1.05, color="grey", linestyle=":", linewidth=1)
    ax.axvline(0.4, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("best-effort normalized throughput (system throughput - 1)")
    ax.set_ylabel("high-priority p99 / alone")
    c = report["config"]
    ax.set_title(f"{c['hp_model']} at load {c['load']} next to one training job (sim, {c['gpu']})\n"
                 f"dotted: p99 1.05x alone, system throughput 1.4", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
