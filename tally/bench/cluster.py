"""`tally-bench cluster`: placement policies on a simulated cluster.

1. Profiled pairs: every (online job, load, best-effort job, SM mode) of the job
   catalog measured on tally's sim backend (tally/cluster/placement/pairs.py),
   cached under ~/.cache/tally/cluster by their parameters (the slow part, once).
2. The speed predictor (MLP, 4 x 64) trained on a random 80% of the pairs, its
   error measured on the other 20% (held-out pairs) and on the pairs of
   best-effort jobs it never saw (held-out jobs, from a second predictor trained
   without them).
3. The cluster simulator (cluster_sim.py) runs each policy on the same cluster,
   deciding with the predictor, charging jobs by the measured pairs.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tally import paths
from tally.backends.sim.model import GPU_PRESETS
from tally.bench.cluster_sim import POLICIES, ClusterModel, make_workload, simulate
from tally.cluster.placement import catalog
from tally.cluster.placement.pairs import FIXED_SM_PERCENT, PairSet, cached_pairs, dynamic_sm_percent, measure_pairs
from tally.cluster.placement.predictor import SpeedPredictor, features


@dataclass(frozen=True)
class ClusterConfig:
    gpus: int = 1000
    jobs: int = 3000
    policies: tuple[str, ...] = POLICIES
    gpu: str = "a100"
    online_types: int = 6
    best_effort_types: int = 16
    loads: tuple[float, ...] = (0.15, 0.35, 0.55)
    pair_seconds: float = 0.3            # virtual seconds per measured pair
    arrival_hours: float = 3.0
    median_job_minutes: float = 20.0
    outage_rate_per_gpu_day: float = 0.5
    interval_s: float = 60.0
    seed: int = 0
    workers: int = 0                     # processes measuring pairs (0: every core)
    predictor_iterations: int = 2000     # L-BFGS iterations training the MLP

    def validate(self) -> None:
        if self.gpus < 1 or self.jobs < 1:
            raise ValueError(f"--gpus and --jobs must be >= 1, got {self.gpus} and {self.jobs}")
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown or not self.policies:
            raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
        if self.gpu not in GPU_PRESETS:
            raise ValueError(f"unknown GPU {self.gpu!r}; choose one of {', '.join(GPU_PRESETS)}")
        if self.online_types < 1 or self.best_effort_types < 2:
            raise ValueError("need at least 1 online and 2 best-effort job types")
        if self.predictor_iterations < 1:
            raise ValueError(f"--predictor-iterations must be >= 1, got {self.predictor_iterations}")
        if not self.pair_seconds > 0:
            raise ValueError(f"--pair-seconds must be > 0, got {self.pair_seconds}")
        if len(self.loads) < 2 or list(self.loads) != sorted(self.loads) or not 0 < self.loads[0] < self.loads[-1] < 1:
            raise ValueError(f"--loads must be at least two ascending values in (0, 1), got {self.loads}")


def pair_set(config: ClusterConfig, cache_dir: Path | None) -> tuple[PairSet, float, bool]:
    gpu = GPU_PRESETS[config.gpu]
    online = catalog.online_jobs(config.online_types)
    best_effort = catalog.best_effort_jobs(config.best_effort_types)

    def make() -> PairSet:
        return measure_pairs(gpu, online, list(config.loads), best_effort, seconds=config.pair_seconds,
                             workers=config.workers or None)

    started = time.perf_counter()
    key = {"v": 1, "gpu": config.gpu, "online": config.online_types, "be": config.best_effort_types,
           "loads": list(config.loads), "seconds": config.pair_seconds}
    if cache_dir is None:
        return make(), time.perf_counter() - started, False
    pairs, cached = cached_pairs(cache_dir, key, make)
    return pairs, time.perf_counter() - started, cached


def split(pairs: PairSet, seed: int) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pairs.pairs))
    cut = int(0.8 * len(order))
    return [pairs.pairs[k] for k in order[:cut]], [pairs.pairs[k] for k in order[cut:]]


def held_out_jobs_error(pairs: PairSet, seed: int, max_iter: int) -> dict:
    """Error on the pairs of a quarter of the best-effort jobs, by a predictor trained without them."""
    names = sorted({p.best_effort for p in pairs.pairs})
    rng = np.random.default_rng(seed + 7)
    unseen = set(rng.choice(names, max(1, len(names) // 4), replace=False))
    train = [p for p in pairs.pairs if p.best_effort not in unseen]
    test = [p for p in pairs.pairs if p.best_effort in unseen]
    model = SpeedPredictor.train(pairs.gpu, train, pairs.profiles, seed=seed, max_iter=max_iter)
    return {**model.errors(test, pairs.profiles), "unseen_jobs": sorted(unseen)}


def cluster_model(config: ClusterConfig, pairs: PairSet, predictor: SpeedPredictor) -> ClusterModel:
    online = [o.name for o in catalog.online_jobs(config.online_types)]
    be = [b.name for b in catalog.best_effort_jobs(config.best_effort_types)]
    loads = np.array(config.loads)
    shape = (len(online), len(loads), len(be), 2)
    truth_be, truth_p99 = np.zeros(shape), np.ones(shape)
    index = {n: k for k, n in enumerate(online)}, {float(x): k for k, x in enumerate(loads)}, \
        {n: k for k, n in enumerate(be)}
    for p in pairs.pairs:
        m = 1 if p.sm_mode == "fixed" else 0
        at = (index[0][p.online], index[1][float(p.load)], index[2][p.best_effort], m)
        truth_be[at], truth_p99[at] = p.be_normalized, p.hp_p99_ratio
    pred_loads = np.linspace(loads[0], loads[-1], 41)
    rows, at = [], []
    for i, o in enumerate(online):
        for li, load in enumerate(pred_loads):
            for j, b in enumerate(be):
                for m, share in enumerate((dynamic_sm_percent(pairs.profiles[o], load), FIXED_SM_PERCENT)):
                    rows.append(features(pairs.profiles[o], load, pairs.profiles[b], share))
                    at.append((i, li, j, m))
    pred = np.zeros((len(online), len(pred_loads), len(be), 2))
    pred[tuple(np.array(at).T)] = predictor.predict_rows(np.array(rows))
    gpu = GPU_PRESETS[config.gpu]
    return ClusterModel(loads, truth_be, truth_p99, pred_loads, pred,
                        np.array([pairs.profiles[o].memory_bytes for o in online]),
                        np.array([pairs.profiles[b].memory_bytes for b in be]), gpu.memory_bytes)


def run_cluster(config: ClusterConfig, cache_dir: Path | None = paths.cache_dir() / "cluster",
                predictor_in: Path | None = None, predictor_out: Path | None = None) -> dict:
    config.validate()
    pairs, pair_seconds, cached = pair_set(config, cache_dir)
    train, test = split(pairs, config.seed)
    started = time.perf_counter()
    if predictor_in is not None:
        predictor = SpeedPredictor.load(predictor_in)
    else:
        predictor = SpeedPredictor.train(pairs.gpu, train, pairs.profiles, seed=config.seed,
                                         max_iter=config.predictor_iterations)
    train_seconds = time.perf_counter() - started
    if predictor_out is not None:
        predictor.save(predictor_out)
    report = {
        "config": asdict(config),
        "pairs": {"count": len(pairs.pairs), "seconds": pair_seconds, "from_cache": cached},
        "predictor": {"hidden_layers": [64, 64, 64, 64], "trained_pairs": predictor.trained_pairs,
                      "train_seconds": train_seconds, "held_out_pairs": predictor.errors(test, pairs.profiles),
                      "held_out_jobs": held_out_jobs_error(pairs, config.seed, config.predictor_iterations)},
        "policies": {},
    }
    started = time.perf_counter()
    model = cluster_model(config, pairs, predictor)
    workload = make_workload(model, config.gpus, config.jobs, config.seed, config.arrival_hours,
                             config.median_job_minutes, config.outage_rate_per_gpu_day)
    report["setup_seconds"] = time.perf_counter() - started
    for policy in config.policies:
        started = time.perf_counter()
        result = simulate(model, workload, policy, config.interval_s, config.seed)
        result["wall_seconds"] = time.perf_counter() - started
        report["policies"][policy] = result
    report["ratios"] = ratios(report["policies"])
    return report


def ratios(results: dict) -> dict:
    if "matching" not in results:
        return {}
    m = results["matching"]
    out = {}
    for other, r in results.items():
        if other == "matching":
            continue
        out[f"matching_vs_{other}"] = {
            "total_normalized_throughput": m["total_normalized_throughput"] / r["total_normalized_throughput"],
            "avg_jct": (r["avg_jct_hours"] / m["avg_jct_hours"]) if m["avg_jct_hours"] else None,
            "makespan": (r["makespan_hours"] / m["makespan_hours"]) if m["makespan_hours"] else None,
        }
    return out


def summary(report: dict) -> str:
    p = report["predictor"]
    lines = [f"pairs: {report['pairs']['count']} measured on the sim in {report['pairs']['seconds']:.1f} s"
             f"{' (cached)' if report['pairs']['from_cache'] else ''}; predictor trained on "
             f"{p['trained_pairs']} in {p['train_seconds']:.1f} s",
             f"predictor error: held-out pairs MAE {p['held_out_pairs']['mae']:.3f} "
             f"(R^2 {p['held_out_pairs']['r2']:.2f}); unseen jobs MAE {p['held_out_jobs']['mae']:.3f}"]
    for name, r in report["policies"].items():
        lines.append(f"{name:>16}: total normalized throughput {r['total_normalized_throughput']:8.1f}  "
                     f"avg JCT {r['avg_jct_hours']:.2f} h  makespan {r['makespan_hours']:.2f} h  online p99 "
                     f"{r['online_p99_vs_alone_mean']:.3f}x alone (p99 {r['online_p99_vs_alone_p99']:.3f}x)  "
                     f"[{r['wall_seconds']:.1f} s]")
    for name, r in report["ratios"].items():
        lines.append(f"{name}: throughput {r['total_normalized_throughput']:.3f}x, JCT {r['avg_jct']:.3f}x shorter, "
                     f"makespan {r['makespan']:.3f}x shorter")
    return "\n".join(lines)
