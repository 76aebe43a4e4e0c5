"""The pass-test kernels (tests/cuda/passes) run on the CPU emulator in every form
and give the numpy reference: __syncthreads_count/_and/_or after early returns
(unified synchronization's second barrier), a barrier inside an asm scope
(flattened), warp shuffles before a block barrier and early returns, and
(sliced only) whole warps returning before shuffles and a block barrier. The
untransformed PTB form of the early-return reductions deadlocks, which the
emulator reports. (The corpus kernels' equivalence is tests/test_emulator_passes.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from emulator_corpus import Buf, Case, Launch, check_case, i32, run_case
from emulator_variants import PTBRunner, launch_sliced, launch_variant
from passes_support import ALL_PASSES, pass_kernel_ptx

from ptx_passes import parse_module, print_module
from ptx_passes.pipeline import transform_module
from tally.backends.base import ModuleSource
from tally.protocol.errors import CUDA_ERROR_LAUNCH_FAILED, DeviceError
from tally.backends.emulator import EmulatorBackend


def _votes_case() -> Case:
    n, block, grid = 200, 64, 4      # the last block has 8 live threads, 56 return at once
    x = np.random.default_rng(7).integers(-3, 10, grid * block).astype(np.int32)
    x[:block] = np.abs(x[:block]) + 1            # block 0: every thread votes "positive"
    live = [x[b * block:min((b + 1) * block, n)] for b in range(grid)]
    return Case("block_votes", "sync_reductions.cu",
                [Launch("block_votes", (grid, 1, 1), (block, 1, 1),
                        (Buf("in"), Buf("count"), Buf("all"), Buf("any"), i32(n)))],
                {"in": x, "count": np.zeros(grid, np.int32), "all": np.zeros(grid, np.int32),
                 "any": np.zeros(grid, np.int32)},
                {"count": np.array([(v > 0).sum() for v in live], np.int32),
                 "all": np.array([(v > 0).all() for v in live], np.int32),
                 "any": np.array([(v < 0).any() for v in live], np.int32)})


def _asm_scope_case() -> Case:
    grid, block = 3, 32
    return Case("barrier_in_asm_scope", "sync_reductions.cu",
                [Launch("barrier_in_asm_scope", (grid, 1, 1), (block, 1, 1), (Buf("out"),))],
                {"out": np.full(grid * block, -1, np.int32)},
                {"out": np.arange(grid * block, dtype=np.int32)})


def _warp_sum_case() -> Case:
    grid, block, warps = 3, 128, 3   # the fourth warp of each block returns at once
    x = np.random.default_rng(3).integers(-100, 100, grid * block).astype(np.int32)
    return Case("warp_then_block_sum", "warp_sync.cu",
                [Launch("warp_then_block_sum", (grid, 1, 1), (block, 1, 1), (Buf("in"), Buf("out"), i32(warps)))],
                {"in": x, "out": np.zeros(grid, np.int32)},
                {"out": x.reshape(grid, block)[:, :32 * warps].sum(axis=1).astype(np.int32)})


def _shuffle_sum_case() -> Case:
    grid, block = 3, 96
    x = np.random.default_rng(4).integers(-100, 100, grid * block).astype(np.int32)
    return Case("shuffle_then_block_sum", "warp_sync.cu",
                [Launch("shuffle_then_block_sum", (grid, 1, 1), (block, 1, 1), (Buf("in"), Buf("out")))],
                {"in": x, "out": np.zeros(grid, np.int32)},
                {"out": x.reshape(grid, block).sum(axis=1).astype(np.int32)})


CASES = {"block_votes": ("sync_reductions", _votes_case), "barrier_in_asm_scope": ("sync_reductions", _asm_scope_case),
         "shuffle_then_block_sum": ("warp_sync", _shuffle_sum_case),
         "warp_then_block_sum": ("warp_sync", _warp_sum_case)}
# warp_then_block_sum is refused by unified sync and PTB (a returning warp skips its shuffles,
# which the static check cannot tell from a single returning thread): original and sliced only.
ONLY_SLICED = {"warp_then_block_sum"}

FORMS = {
    "original": lambda r: None,
    "sliced-2": lambda r: launch_sliced(r, 2),
    "sliced-per-block": lambda r: launch_sliced(r, "per-block"),
    "unified-sync": lambda r: launch_variant("unified-sync"),
    "ptb-2-workers": lambda r: PTBRunner(r, workers=2),
    "ptb-preempted-while-running": lambda r: PTBRunner(r, workers=1, preempt="during", at_task=1),
    "ptb-preempted-before-start": lambda r: PTBRunner(r, workers=2, preempt="before"),
}


@pytest.fixture(scope="module")
def backend():
    b = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    yield b
    b.close()


@pytest.fixture(scope="module")
def modules(backend):
    loaded = {}
    for source in {s for s, _c in CASES.values()}:
        result = transform_module(parse_module(pass_kernel_ptx(source), source), ALL_PASSES)
        text = print_module(result.module)
        loaded[source] = (backend.module_load(ModuleSource(original=text.encode(), ptx=text)), result.kernels)
    yield loaded
    for module, _reports in loaded.values():
        backend.module_unload(module)


def _run(backend, modules, kernel: str, form):
    source, make_case = CASES[kernel]
    module, reports = modules[source]
    case = make_case()
    launcher = form(reports)
    outputs = run_case(backend, module, case, **({} if launcher is None else {"launcher": launcher}))
    check_case(case, outputs)
    return launcher


@pytest.mark.parametrize("kernel,form", [(k, f) for k in CASES for f in FORMS
                                         if k not in ONLY_SLICED or f in ("original", "sliced-2", "sliced-per-block")])
def test_every_form_gives_the_reference(backend, modules, kernel, form):
    launcher = _run(backend, modules, kernel, FORMS[form])
    if form == "ptb-preempted-before-start":
        assert launcher.log.counters[0] == 0       # the flag was up: no task started


def test_untransformed_ptb_deadlocks_where_threads_return_before_a_barrier(backend, modules):
    with pytest.raises(DeviceError) as failure:
        _run(backend, modules, "block_votes", lambda r: PTBRunner(r, workers=1, variant="ptb-raw"))
    assert failure.value.code == CUDA_ERROR_LAUNCH_FAILED
    assert "divergent barrier" in failure.value.message and "barrier.sync 15" in failure.value.message
