"""The co-location benchmark's figure: the high-priority job's latency CDF
(alone and under each policy) and every job's normalized throughput."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")        # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_colocate(report: dict, latencies_ms: dict[str, np.ndarray], path: Path | str) -> None:
    policies = list(report["policies"])
    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    # alone last, dashed black, so it stays visible where a policy matches it
    for name in sorted(latencies_ms, key=lambda n: n == "alone"):
        values = latencies_ms[name]
        if len(values) == 0:
            continue
        xs = np.sort(values)
        ys = np.arange(1, xs.size + 1) / xs.size
        style = dict(color="black", linestyle="--", linewidth=1.4) if name == "alone" else dict(linewidth=1.6)
        cdf.step(xs, ys, where="post", label=name, **style)
    cdf.set_xscale("log")
    cdf.set_xlabel("high-priority request latency (ms)")
    cdf.set_ylabel("fraction of requests")
    cdf.axhline(0.99, color="grey", linestyle=":", linewidth=0.8)
    cdf.legend(loc="lower right", fontsize=8)
    cdf.set_title("latency CDF (dotted: p99)")

    x = np.arange(len(policies))
    hp = [report["policies"][p]["hp_normalized_throughput"] for p in policies]
    bars.bar(x, hp, label="high-priority", color="tab:blue")
    bottom = np.array(hp, dtype=float)
    n_be = max((len(report["policies"][p]["be_normalized_throughput"]) for p in policies), default=0)
    for j in range(n_be):
        vals = np.array([report["policies"][p]["be_normalized_throughput"][j] for p in policies])
        bars.bar(x, vals, bottom=bottom, label=f"best-effort {j + 1}", alpha=0.8)
        bottom += vals
    for xi, total in zip(x, bottom, strict=True):
        bars.text(xi, total + 0.02, f"{total:.2f}", ha="center", fontsize=8)
    bars.set_xticks(x, policies, rotation=15)
    bars.set_ylabel("normalized throughput (stacked = system throughput)")
    bars.legend(fontsize=8)
    bars.set_title("throughput vs alone")
    config = report["config"]
    fig.suptitle(f"{config['hp_model']} (load {config['load']}, {config['trace']} trace) + "
                 f"{config['be_jobs']} x {config['be_model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
