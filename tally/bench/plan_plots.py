"""The figure `tally-bench plan --png` writes: GPUs per plan and workload, one
panel per partition kind, with the LP lower bound marked."""
from __future__ import annotations

from pathlib import Path

PLANS = (("whole_gpus", "whole GPUs"), ("all_smallest", "all smallest"), ("greedy", "greedy (MIG-serving)"),
         ("optimizer", "optimizer"))
TITLES = {"mig": "MIG instances", "sm-share": "tally SM shares"}


def plot_plan(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(r["partitions"] for r in rows))
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.5 * len(kinds), 4.2), squeeze=False, sharey=True)
    width = 0.2
    for ax, kind in zip(axes[0], kinds):
        mine = [r for r in rows if r["partitions"] == kind]
        xs = range(len(mine))
        for k, (key, label) in enumerate(PLANS):
            ax.bar([x + (k - 1.5) * width for x in xs], [r[key] for r in mine], width, label=label)
        for x, r in zip(xs, mine):
            ax.hlines(r["lp_bound"], x - 2 * width, x + 2 * width, colors="black", linestyles="dashed",
                      label="LP lower bound" if x == 0 else None)
            ax.annotate(f"-{100 * r['saving_vs_whole']:.0f}%", (x + 1.5 * width, r["optimizer"]),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), [r["workload"] for r in mine])
        ax.set_title(TITLES.get(kind, kind))
        ax.set_ylabel("GPUs")
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    fig.suptitle("GPUs needed per plan (labels: optimizer's saving vs whole GPUs)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
