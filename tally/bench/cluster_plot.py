"""The figure of `tally-bench cluster --png`: per policy, total normalized
throughput of best-effort jobs and average JCT (bars), and the JCT distribution."""
from __future__ import annotations

from pathlib import Path


def plot_cluster(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(report["policies"])
    results = [report["policies"][p] for p in policies]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    axes[0].bar(policies, [r["total_normalized_throughput"] for r in results], color="tab:blue")
    axes[0].set_ylabel("total normalized throughput\n(best-effort, while jobs arrive)")
    axes[1].bar(policies, [r["avg_jct_hours"] for r in results], color="tab:orange")
    axes[1].set_ylabel("average JCT (hours)")
    for name, r in zip(policies, results):
        jct = r["jct_hours_sorted"]
        if jct:
            axes[2].plot(jct, [(k + 1) / len(jct) for k in range(len(jct))], label=name)
    axes[2].set_xscale("log")
    axes[2].set_xlabel("JCT (hours, log scale)")
    axes[2].set_ylabel("fraction of jobs")
    axes[2].legend()
    for ax in axes[:2]:
        ax.tick_params(axis="x", rotation=20)
    c = report["config"]
    err = report["predictor"]["held_out_pairs"]["mae"]
    fig.suptitle(f"{c['gpus']} GPUs, {c['jobs']} best-effort jobs (sim-measured pairs; predictor "
                 f"held-out MAE {err:.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
