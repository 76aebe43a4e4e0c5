"""The transparent profiler: candidates, exploration order, choice, and the
on-disk cache; and the profiler driven by real runs on the sim."""
from __future__ import annotations

import json
import struct


from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import KernelCost
from tally.backends.sim.variants import SimVariantProvider
from tally.scheduler import Launch, ProfileCache, StreamExecutor, TransparentProfiler, make_policy
from tally.scheduler.profile_cache import default_cache_directory
from tally.scheduler.profiler import WHOLE_KERNEL, RunConfig, candidates
from tally.scheduler.run_mode import RunMode

S = 100        # SM count used in these tests


def test_candidates_are_multiples_of_the_sm_count():
    ptb = [RunConfig(RunMode.PTB, w) for w in (100, 200, 400, 800)]
    sliced = [RunConfig(RunMode.SLICE, b) for b in (100, 200, 400, 800)]
    assert candidates(1000, S, True, True) == ptb + sliced + [WHOLE_KERNEL]
    assert candidates(1000, S, False, True, max_workers=250) == ptb[:2] + [WHOLE_KERNEL]
    assert candidates(1000, S, False, True, max_workers=30) == [RunConfig(RunMode.PTB, 30), WHOLE_KERNEL]
    assert candidates(80, S, True, True) == [WHOLE_KERNEL]


def feed(profiler, key, config, blocks, seconds, units=2, clean=True):
    for _ in range(units):
        profiler.observe(key, config, device_seconds=seconds, cycle_seconds=seconds, blocks=blocks,
                         clean=clean)


def test_explores_ptb_then_finer_slices_and_picks_the_fastest_within_threshold():
    p = TransparentProfiler(S, turnaround_threshold_ms=0.05)
    key, total = "k", 1000
    order = []
    # A made-up device: PTB rounds take 60 us (over the 50 us threshold) and at
    # most 400 workers run at once; a slice of n blocks takes 5 us + 10 us per 100.
    while True:
        config, measuring = p.plan(key, total, can_slice=True, can_ptb=True)
        if not measuring:
            break
        order.append(config.label)
        if config.kind is RunMode.PTB:
            feed(p, key, config, blocks=2 * config.size, seconds=2 * 60e-6 * max(1, config.size / 400))
        else:
            n = config.size if config.kind is RunMode.SLICE else total
            feed(p, key, config, blocks=n, seconds=5e-6 + 10e-6 * n / 100)
    # the original (predicted 106 us > 2 x 50 us) is never run while exploring
    assert order == ["ptb:100", "ptb:200", "ptb:400", "ptb:800",
                     "slice:100", "slice:200", "slice:400", "slice:800"]
    # slice:800 is faster (9.4 blocks/us) but turns around in 85 us; slice:400: 45 us, 8.9 blocks/us
    assert config == RunConfig(RunMode.SLICE, 400)
    assert p.choice(key) == config


def test_without_a_candidate_under_the_threshold_the_smallest_turnaround_wins():
    p = TransparentProfiler(S, turnaround_threshold_ms=0.001)
    while True:
        config, measuring = p.plan("k", 400, can_slice=False, can_ptb=True)
        if not measuring:
            break
        feed(p, "k", config, blocks=config.size, seconds=config.size * 1e-7)   # turnaround grows with W
    assert config == RunConfig(RunMode.PTB, 100)


def test_untransformable_or_tiny_kernels_run_as_they_are():
    p = TransparentProfiler(S)
    assert p.plan("k", 5000, can_slice=False, can_ptb=False) == (WHOLE_KERNEL, False)
    assert p.plan("small", 50, can_slice=True, can_ptb=True) == (WHOLE_KERNEL, False)


def test_contended_measurements_are_not_used_until_nothing_else_comes():
    p = TransparentProfiler(S, min_units=1)
    config, _ = p.plan("k", 1000, can_slice=True, can_ptb=True)
    for _ in range(7):
        p.observe("k", config, device_seconds=1.0, cycle_seconds=1.0, blocks=100, clean=False)
    assert p.measurements("k")[config].units == 0
    p.observe("k", config, device_seconds=1.0, cycle_seconds=1.0, blocks=100, clean=False)   # the 8th
    assert p.measurements("k")[config].units == 1


def _profile_everything(p, key="k"):
    while True:
        config, measuring = p.plan(key, 1000, can_slice=True, can_ptb=True)
        if not measuring:
            return config
        n = config.size if config.kind is not RunMode.WHOLE else 1000
        feed(p, key, config, blocks=n, seconds=n * 1e-7 + 2e-6)


def test_profiles_are_cached_per_gpu_and_reused_with_a_new_threshold(tmp_path):
    first = TransparentProfiler(S, 0.0316, cache=ProfileCache(tmp_path, "NVIDIA A100-SXM4-40GB"))
    chosen = _profile_everything(first)
    path = tmp_path / "NVIDIA_A100-SXM4-40GB.json"
    stored = json.loads(path.read_text())
    assert stored["version"] == 1 and "k" in stored["kernels"]
    again = TransparentProfiler(S, 0.0316, cache=ProfileCache(tmp_path, "NVIDIA A100-SXM4-40GB"))
    assert again.plan("k", 1000, can_slice=True, can_ptb=True) == (chosen, False)   # nothing to measure
    looser = TransparentProfiler(S, 1.0, cache=ProfileCache(tmp_path, "NVIDIA A100-SXM4-40GB"))
    config, measuring = looser.plan("k", 1000, can_slice=True, can_ptb=True)
    assert config != chosen                      # same measurements, different choice
    other_gpu = TransparentProfiler(S, 0.0316, cache=ProfileCache(tmp_path, "NVIDIA H100"))
    assert other_gpu.plan("k", 1000, can_slice=True, can_ptb=True)[1] is True


def test_an_unreadable_cache_is_moved_aside_not_lost(tmp_path, caplog):
    path = tmp_path / "gpu.json"
    path.write_text("{not json")
    p = TransparentProfiler(S, cache=ProfileCache(tmp_path, "gpu"))
    assert p.measurements("k") == {}
    aside = list(tmp_path.glob("gpu.json.unreadable-*"))
    assert len(aside) == 1 and aside[0].read_text() == "{not json"
    assert "unreadable" in caplog.text
    _profile_everything(p)
    assert json.loads(path.read_text())["kernels"]


def test_default_cache_directory_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TALLY_PROFILE_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_directory() == tmp_path / "explicit"
    monkeypatch.delenv("TALLY_PROFILE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_directory() == tmp_path / "xdg" / "tally" / "profiles"


def test_profiling_on_the_sim_settles_on_a_configuration_and_caches_it(tmp_path):
    sim = SimBackend()
    sim.define_kernel("gemm", (8,), KernelCost(block_time_us=12.0, max_blocks_per_sm=2))
    fn = sim.module_function(sim.module_load(sim_module_source("gemm")), "gemm")
    cache = ProfileCache(tmp_path, sim.describe().name)
    profiler = TransparentProfiler(sim.gpu.sm_count, cache=cache)
    ex = StreamExecutor(sim, make_policy("priority"), SimVariantProvider(), profiler, clock=sim.clock)
    ex.add_client("be")
    launch = Launch(fn, (20_000, 1, 1), (256, 1, 1), 0, struct.pack("<Q", 0))
    for _ in range(40):
        ex.submit("be", 0, launch)
    ex.synchronize_client("be")
    key = "gemm|20000x1x1|256x1x1|0"
    choice = profiler.choice(key)
    assert choice is not None and choice.kind in (RunMode.PTB, RunMode.SLICE)
    measured = profiler.measurements(key)
    assert all(m.turnaround > 0 for m in measured.values())
    if choice.kind is RunMode.SLICE:
        assert measured[choice].turnaround <= 0.0316e-3
    # a fresh server on the same GPU model runs the chosen configuration at once
    fresh = TransparentProfiler(sim.gpu.sm_count, cache=ProfileCache(tmp_path, sim.describe().name))
    assert fresh.plan(key, 20_000, can_slice=True, can_ptb=True) == (choice, False)
    assert ex.counters()["kernels_" + ("sliced" if choice.kind is RunMode.SLICE else "ptb")] >= 1
