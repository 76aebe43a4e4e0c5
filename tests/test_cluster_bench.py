"""The cluster simulator: its dynamics on a hand-made cluster, and `tally-bench
cluster` end to end at a small size (pairs measured on the sim, predictor trained,
saved and reused, JSON and PNG written), with its refusals."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tally.bench.cluster_sim import POLICIES, ClusterModel, Workload, simulate

GiB = 1 << 30


def model(truth_be: np.ndarray, pred_be: np.ndarray | None = None, be_memory_gib=(10, 35)) -> ClusterModel:
    loads = np.array([0.2, 0.6])
    return ClusterModel(loads, truth_be, np.ones_like(truth_be), loads, truth_be if pred_be is None else pred_be,
                        np.array([10 * GiB]), np.array(be_memory_gib) * GiB, 40 * GiB)


def workload(gpus: int, work: list[float], types: list[int], outages=()) -> Workload:
    return Workload(np.zeros(gpus, dtype=int), np.full(gpus, 0.2), np.zeros(gpus), np.array(types),
                    np.zeros(len(work)), np.array(work, dtype=float), np.array(outages, dtype=float).reshape(-1, 3))


def test_a_job_runs_at_its_true_normalized_throughput():
    truth = np.zeros((1, 2, 2, 2))
    truth[0, :, 0, :] = 0.5                       # job type 0 at half speed at every load
    r = simulate(model(truth), workload(1, [3600.0], [0]), "matching", interval=60)
    assert r["jobs_finished"] == 1
    assert r["avg_jct_hours"] == pytest.approx(2.0, abs=0.02)   # an hour of work at 0.5
    assert r["total_normalized_throughput"] == 0                 # one arrival at 0: the window is empty


def test_memory_that_does_not_fit_is_never_placed():
    truth = np.full((1, 2, 2, 2), 0.5)            # type 1 needs 35 GiB next to a 10 GiB online job on 40 GiB
    for policy in POLICIES:
        r = simulate(model(truth), workload(2, [600.0, 600.0], [0, 1]), policy, max_hours=2)
        assert r["jobs_finished"] == 1, policy


def test_outage_evicts_and_the_job_resumes_elsewhere():
    truth = np.full((1, 2, 2, 2), 1.0)
    r = simulate(model(truth), workload(2, [1800.0], [0], outages=[(0, 300, 4000), (1, 0, 120)]), "matching")
    assert r["evictions"] >= 1 and r["jobs_finished"] == 1


def test_matching_uses_the_predictor_not_the_truth():
    truth = np.zeros((1, 2, 2, 2))
    truth[0, :, 0, :], truth[0, :, 1, :] = 0.9, 0.1
    wrong = truth[:, :, ::-1, :].copy()           # a predictor that has the two jobs backwards
    one_gpu = workload(1, [3600.0, 3600.0], [0, 1])
    right = simulate(model(truth, be_memory_gib=(10, 10)), one_gpu, "matching")
    misled = simulate(model(truth, wrong, be_memory_gib=(10, 10)), one_gpu, "matching")
    # the fast job first: JCTs 1.1 h and 11.1 h; the slow one first: 10 h and 11.1 h
    assert right["jct_hours_sorted"] == pytest.approx([1.11, 11.11], abs=0.02)
    assert misled["jct_hours_sorted"] == pytest.approx([10.0, 11.11], abs=0.02)


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown placement policy 'fastest'"):
        simulate(model(np.ones((1, 2, 2, 2))), workload(1, [60.0], [0]), "fastest")


def _bench(tmp_path, *args):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "tally.cli.bench_main", "cluster", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)


SMALL = ("--gpus", 40, "--jobs", 80, "--online-types", 1, "--best-effort-types", 2, "--loads", "0.2,0.5",
         "--pair-seconds", 0.15, "--arrival-hours", 0.5, "--workers", 1, "--predictor-iterations", 200)


def test_tally_bench_cluster_small(tmp_path):
    out, png, saved = tmp_path / "c.json", tmp_path / "c.png", tmp_path / "p.joblib"
    r = _bench(tmp_path, *SMALL, "--json", out, "--png", png, "--predictor-out", saved)
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert report["pairs"] == {"count": 8, "seconds": report["pairs"]["seconds"], "from_cache": False}
    assert set(report["policies"]) == set(POLICIES)
    for result in report["policies"].values():
        assert result["jobs_finished"] == 80 and result["total_normalized_throughput"] > 0
        assert result["online_p99_vs_alone_mean"] >= 0.9
    assert set(report["ratios"]) == {"matching_vs_greedy", "matching_vs_random", "matching_vs_protection-only"}
    assert report["predictor"]["held_out_pairs"]["pairs"] == 2 and report["predictor"]["held_out_pairs"]["mae"] >= 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "matching_vs_random: throughput" in r.stdout
    again = _bench(tmp_path, *SMALL, "--json", out, "--predictor-in", saved, "--policies", "matching")
    assert again.returncode == 0, again.stderr
    assert json.loads(out.read_text())["pairs"]["from_cache"] is True


def test_tally_bench_cluster_refusals(tmp_path):
    r = _bench(tmp_path, "--policies", "fastest")
    assert r.returncode == 2 and "unknown policies ['fastest']" in r.stderr
    r = _bench(tmp_path, "--loads", "0.5")
    assert r.returncode == 2 and "--loads must be at least two ascending values" in r.stderr
    bad = tmp_path / "bad.joblib"
    bad.write_bytes(b"not a predictor")
    r = _bench(tmp_path, *SMALL, "--predictor-in", bad)
    assert r.returncode == 2 and "bad.joblib is not a speed predictor file" in r.stderr
