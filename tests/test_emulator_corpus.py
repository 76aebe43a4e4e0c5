"""Every kernel of the CUDA corpus runs on the emulator through the
DeviceBackend API and matches its numpy reference (tests/emulator_corpus.py)."""
from __future__ import annotations

import pytest
from emulator_corpus import CASES, check_case, run_case
from ptx_corpus import CORPUS_DIR, compile_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend


@pytest.fixture(scope="module")
def backend():
    b = EmulatorBackend(printf_to_stdout=False)
    yield b
    b.close()


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_kernel_matches_numpy(backend, case, arch):
    ptx = compile_ptx(CORPUS_DIR / case.source, arch=arch)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    stream = backend.stream_create()
    try:
        outputs = run_case(backend, module, case, stream=stream)
        check_case(case, outputs, backend.take_printf(stream))
    finally:
        backend.stream_destroy(stream)
        backend.module_unload(module)
