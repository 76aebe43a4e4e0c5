"""The server's module registry for best-effort jobs: one module holding the
originals and their variants, and the job's own image when that cannot be."""
from __future__ import annotations

from pathlib import Path

from ptx_corpus import compile_ptx

from tally.protocol.errors import CUDA_ERROR_INVALID_PTX, DeviceError
from tally.backends.null import NullBackend
from tally.server.client.modules import ModuleRegistry
from tally.backends.ptx_variants import PtxVariantProvider

CORPUS = Path(__file__).parent / "cuda" / "corpus"


class RefusesVariantModules(NullBackend):
    """The null device with one injected fault: it refuses any module that holds
    tally's variant entries (as a driver whose JIT rejects a PTX would)."""

    def module_load(self, source):
        if source.ptx is not None and "__tally_" in source.ptx:
            raise DeviceError(CUDA_ERROR_INVALID_PTX, "injected: JIT refused the module")
        return super().module_load(source)


def test_best_effort_module_holds_originals_and_variants():
    ptx = compile_ptx(CORPUS / "saxpy.cu", arch="sm_90")
    provider = PtxVariantProvider()
    registry = ModuleRegistry(NullBackend(), provider)
    module = registry.load(ptx.encode())
    assert module.variants is not None
    fn = registry.function(module.module_id, "saxpy").backend_function
    assert provider.sliced(fn).function.name == "saxpy__tally_slice"
    assert provider.ptb(fn).function.name == "saxpy__tally_ptb"


def test_device_refusing_the_variants_module_gets_the_jobs_own_image():
    ptx = compile_ptx(CORPUS / "saxpy.cu", arch="sm_90")
    provider = PtxVariantProvider()
    registry = ModuleRegistry(RefusesVariantModules(), provider)
    module = registry.load(ptx.encode())
    assert module.variants is None
    fn = registry.function(module.module_id, "saxpy").backend_function
    assert [p.size for p in fn.params] == [4, 4, 8, 8]          # the original kernel
    assert provider.sliced(fn) is None and provider.ptb(fn) is None


def test_high_priority_registry_never_transforms():
    ptx = compile_ptx(CORPUS / "saxpy.cu", arch="sm_90")
    registry = ModuleRegistry(NullBackend(), None)
    module = registry.load(ptx.encode())
    assert module.variants is None
    assert "__tally_" not in (module.source.ptx or "")
