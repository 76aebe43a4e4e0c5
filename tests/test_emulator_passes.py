"""Pass equivalence on the emulator: for every corpus kernel, the original, the
sliced variant (1, 2 and 3 slices and one slice per block), the unified-sync
variant and the PTB variant (several worker counts; preempted before it
starts, while it runs, and resumed from a task counter preset after the first
tasks ran) produce the same outputs, which match
the numpy reference. The untransformed PTB form of a kernel whose threads
return before a barrier deadlocks (reported as an error, not a hang), and
unified synchronization makes it run."""
from __future__ import annotations

import numpy as np
import pytest
from emulator_corpus import CASES, CASES_BY_ID, Case, check_case, run_case
from emulator_variants import PTBRunner, launch_sliced, launch_variant, transformed_ptx

from tally.backends.base import ModuleSource
from tally.protocol.errors import CUDA_ERROR_LAUNCH_FAILED, DeviceError
from tally.backends.emulator import EmulatorBackend


@pytest.fixture(scope="module")
def backend():
    b = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    yield b
    b.close()


@pytest.fixture(scope="module")
def originals(backend):
    """Outputs of each case's original kernels (computed once)."""
    cache: dict[str, dict[str, np.ndarray]] = {}

    def get(case: Case):
        if case.id not in cache:
            cache[case.id] = _run(backend, case, None)
        return cache[case.id]
    return get


def _run(backend, case: Case, make_launcher):
    ptx, reports = transformed_ptx(case.source)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    stream = backend.stream_create()
    try:
        kwargs = {} if make_launcher is None else {"launcher": make_launcher(reports)}
        outputs = run_case(backend, module, case, stream=stream, **kwargs)
        check_case(case, outputs, backend.take_printf(stream))
        return outputs
    finally:
        backend.stream_destroy(stream)
        backend.module_unload(module)


def _assert_same(case: Case, got: dict, want: dict) -> None:
    if case.check is not None:
        return  # scheduling-dependent outputs: the case's own check ran on both
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"{case.id}: {name} differs from the original")


VARIANTS = {
    "sliced-1": lambda r: launch_sliced(r, 1),
    "sliced-2": lambda r: launch_sliced(r, 2),
    "sliced-3": lambda r: launch_sliced(r, 3),
    "sliced-per-block": lambda r: launch_sliced(r, "per-block"),
    "unified-sync": lambda r: launch_variant("unified-sync"),
    "ptb-1-worker": lambda r: PTBRunner(r, workers=1),
    "ptb-3-workers": lambda r: PTBRunner(r, workers=3),
    "ptb-preempted-before-start": lambda r: PTBRunner(r, workers=2, preempt="before"),
    "ptb-preempted-while-running": lambda r: PTBRunner(r, workers=1, preempt="during", at_task=1),
    "ptb-resumed-after-1-task": lambda r: PTBRunner(r, workers=2, preempt="resume", at_task=1),
    "ptb-resumed-after-2-tasks": lambda r: PTBRunner(r, workers=1, preempt="resume", at_task=2),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_variant_matches_original(backend, originals, case, variant):
    want = originals(case)
    got = _run(backend, case, VARIANTS[variant])
    _assert_same(case, got, want)


def test_ptb_preempted_mid_run_resumes_where_it_stopped(backend):
    """A PTB kernel with many tasks, stopped from another stream after a few tasks
    and relaunched: the first launch ends early (0 < counter < total) and the
    resumed launches finish the rest, with the same result."""
    base = CASES_BY_ID["reduce_sum"]
    blocks = 4096          # about 0.1 s of emulation: the stop request lands long before the end
    n = 256 * blocks
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    parts = x.reshape(blocks, 256).copy()
    stride = 128
    while stride:
        parts[:, :stride] = parts[:, :stride] + parts[:, stride:2 * stride]
        stride //= 2
    launch = base.launches[0]
    case = Case("reduce_sum_big", base.source,
                [type(launch)(launch.kernel, (blocks, 1, 1), launch.block, (launch.args[0], launch.args[1], np.int32(n)))],
                {"x": x, "out": np.zeros(blocks, np.float32)}, {"out": parts[:, 0].copy()})
    runners = []

    def make(reports):
        runners.append(PTBRunner(reports, workers=1, preempt="during", at_task=4))
        return runners[-1]

    _run(backend, case, make)
    counters = runners[0].log.counters
    assert 4 <= counters[0] < blocks, f"the first launch was not stopped mid-run: task counters {counters}"
    assert counters[-1] >= blocks


def test_untransformed_ptb_deadlocks_and_unified_sync_fixes_it(backend):
    case = CASES_BY_ID["early_exit_neighbors"]
    with pytest.raises(DeviceError) as failure:
        _run(backend, case, lambda r: PTBRunner(r, workers=1, variant="ptb-raw"))
    assert failure.value.code == CUDA_ERROR_LAUNCH_FAILED
    assert "divergent barrier" in failure.value.message
    assert "early_exit_neighbors__tally_ptb_raw" in failure.value.message
    # The same kernel with unified synchronization (the "ptb" variant) runs, on the same device.
    _run(backend, case, lambda r: PTBRunner(r, workers=1))
