"""Placement: job profiles, pairs measured on the sim, the speed predictor (train,
save, reload, refuse a mismatched file) and the matching (optimal, memory fit and
health respected, against greedy and random)."""
from __future__ import annotations

import itertools

import joblib
import numpy as np
import pytest

from tally.backends.sim.model import GPU_PRESETS
from tally.bench.workloads import TRAINING_MODELS
from tally.cluster.placement import catalog
from tally.cluster.placement.matching import UNUSABLE, greedy, match, random_fit, usable_edges
from tally.cluster.placement.pairs import dynamic_sm_percent, measure_pairs
from tally.cluster.placement.predictor import FORMAT_VERSION, PredictorVersionError, SpeedPredictor
from tally.cluster.placement.profile import profile_best_effort

A100 = GPU_PRESETS["a100"]
GiB = 1 << 30


@pytest.fixture(scope="module")
def small_pairs():
    """2 online jobs x 2 loads x 2 best-effort jobs, dynamic SM: 8 pairs of 0.15 virtual seconds."""
    online = catalog.online_jobs(2)
    best_effort = catalog.best_effort_jobs(2)
    return measure_pairs(A100, online, [0.2, 0.5], best_effort, share_modes=("dynamic",), seconds=0.15, workers=1)


def test_profile_of_whisper_training():
    job = catalog.BestEffortJob("whisper-train", TRAINING_MODELS["whisper-train"], 12 * GiB)
    p = profile_best_effort(A100, job, seconds=0.3)
    assert 9.0 < p.solo_throughput < 11.0          # ~0.1 s per iteration alone on the sim's A100
    assert 0.85 < p.gpu_util <= 1.0 and 0.85 < p.sm_activity <= 1.0
    assert p.mean_kernel_ms > 1.0                 # Whisper's kernels are long
    assert 0 < p.untransformable_share < 0.05     # its two cuBLAS projections are short
    assert p.memory_bytes == 12 * GiB


def test_dynamic_sm_is_what_the_online_job_leaves(small_pairs):
    online = small_pairs.profiles["bert-base"]
    assert dynamic_sm_percent(online, 0.5) == pytest.approx(100 * (1 - 0.5 * online.sm_activity))
    assert dynamic_sm_percent(online, 0.2) > dynamic_sm_percent(online, 0.5)


def test_measured_pairs(small_pairs):
    assert len(small_pairs.pairs) == 8
    for p in small_pairs.pairs:
        assert 0.0 < p.be_normalized < 1.0, p          # sharing never beats having the GPU alone
        assert 0.9 < p.hp_p99_ratio < 2.0, p           # tally's priority scheduling protects the online job
    by = {(p.online, p.load, p.best_effort): p.be_normalized for p in small_pairs.pairs}
    for (online, load, be), value in by.items():
        if load == 0.2:
            assert value > by[(online, 0.5, be)], (online, be)   # a busier online job leaves less


def test_predictor_fits_saves_and_reloads(small_pairs, tmp_path):
    model = SpeedPredictor.train(small_pairs.gpu, small_pairs.pairs, small_pairs.profiles, max_iter=300)
    errors = model.errors(small_pairs.pairs, small_pairs.profiles)
    assert errors["mae"] < 0.05 and errors["pairs"] == 8
    path = tmp_path / "predictor.joblib"
    model.save(path)
    again = SpeedPredictor.load(path)
    p = small_pairs.pairs[0]
    args = (small_pairs.profiles[p.online], p.load, small_pairs.profiles[p.best_effort], p.sm_percent)
    assert again.predict(*args) == model.predict(*args)
    assert abs(model.predict(*args) - p.be_normalized) < 0.1
    with pytest.raises(PredictorVersionError, match="trained for .*A100.*not 'NVIDIA H100"):
        model.predict(*args, gpu=GPU_PRESETS["h100"].name)


def test_predictor_of_another_format_version_is_refused(tmp_path):
    path = tmp_path / "old.joblib"
    joblib.dump({"format_version": FORMAT_VERSION + 1, "gpu": "x", "model": None}, path)
    with pytest.raises(PredictorVersionError, match=f"format version {FORMAT_VERSION + 1}, this tally reads "
                                                   f"version {FORMAT_VERSION}; train a new one"):
        SpeedPredictor.load(path)


def test_too_few_pairs_is_a_clear_error(small_pairs):
    with pytest.raises(ValueError, match="at least 4 profiled pairs, got 2"):
        SpeedPredictor.train(small_pairs.gpu, small_pairs.pairs[:2], small_pairs.profiles)


def _brute_force(weights: np.ndarray) -> float:
    rows, cols = weights.shape
    best = 0.0
    for perm in itertools.permutations(range(cols), rows):
        best = max(best, sum(weights[r, c] for r, c in enumerate(perm) if weights[r, c] >= 0))
    return best


def test_matching_is_the_maximum_weight_matching():
    rng = np.random.default_rng(3)
    for _ in range(30):
        w = rng.uniform(0, 1, (4, 6))
        w[rng.uniform(size=w.shape) < 0.3] = UNUSABLE
        pairs = match(w)
        assert len({r for r, _ in pairs}) == len(pairs) == len({c for _, c in pairs})
        assert all(w[r, c] >= 0 for r, c in pairs)
        assert sum(w[r, c] for r, c in pairs) == pytest.approx(_brute_force(w))


def test_greedy_takes_the_best_pair_first_and_can_lose():
    w = np.array([[0.9, 0.8], [0.8, 0.1]])
    assert sorted(greedy(w)) == [(0, 0), (1, 1)]            # 1.0 in total
    assert sorted(match(w)) == [(0, 1), (1, 0)]             # 1.6


def test_memory_fit_and_health_remove_edges():
    weights = np.array([[0.9, 0.5], [0.8, 0.7], [0.95, 0.9]])
    free = np.array([20, 40, 40]) * GiB                     # GPU 0 runs a bigger online job
    jobs = np.array([30, 10]) * GiB
    healthy = np.array([True, True, False])                 # GPU 2 is unhealthy
    w = usable_edges(weights, free, jobs, healthy)
    assert (w[2] == UNUSABLE).all() and w[0, 0] == UNUSABLE
    assert sorted(match(w)) == [(0, 1), (1, 0)]
    assert sorted(greedy(w)) == [(0, 1), (1, 0)]
    for seed in range(5):
        assert all(w[r, c] >= 0 for r, c in random_fit(w, np.random.default_rng(seed)))
