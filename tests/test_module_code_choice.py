"""Which code of a module image the device runs (tally/server/client/code_choice.py):
the driver's rules, checked on fatbin entries built here and on nvcc's output."""
from __future__ import annotations

import pytest
from ptx_corpus import CORPUS_DIR, compile_ptx

from ptx_passes.fatbin import FatbinEntry
from tally.backends.base import DeviceDescription
from tally.protocol.errors import CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_UNSUPPORTED_PTX_VERSION, DeviceError
from tally.backends.emulator import EmulatorBackend
from tally.server.client.code_choice import choose_code, module_source
from tally.server.client.modules import ModuleRegistry


def device(major: int, minor: int, driver_version: int = 13000) -> DeviceDescription:
    return DeviceDescription(name="test device", uuid=bytes(16), total_memory=1 << 30,
                             compute_capability=(major, minor), sm_count=8, driver_version=driver_version)


def ptx(arch: int, text: str, version: tuple[int, int] = (9, 0)) -> FatbinEntry:
    return FatbinEntry("ptx", arch, version, 0, None, text.encode(), 0, 0)


def cubin(arch: int) -> FatbinEntry:
    return FatbinEntry("cubin", arch, (1, 8), 0, None, b"\x7fELF" + bytes([arch]), 0, 0)


MIXED = [ptx(80, "eighty"), ptx(90, "ninety"), ptx(120, "one-twenty")]


@pytest.mark.parametrize("cc, chosen", [((9, 0), "ninety"), ((8, 6), "eighty"), ((10, 0), "ninety"),
                                        ((12, 0), "one-twenty")])
def test_newest_ptx_not_newer_than_the_device(cc, chosen):
    assert choose_code(MIXED, device(*cc)).ptx == chosen


def test_ptx_only_for_a_newer_architecture_is_no_binary_for_the_device():
    with pytest.raises(DeviceError) as e:
        choose_code([ptx(120, "one-twenty")], device(9, 0))
    assert e.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU
    message = e.value.message
    assert "PTX for compute_120 (ISA 9.0)" in message and "compute capability 9.0" in message
    assert "--emulate-cc" in message and "arch=compute_90" in message


def test_ptx_isa_newer_than_the_driver_is_unsupported_ptx_version():
    newer = [ptx(80, "eighty", version=(9, 5))]
    with pytest.raises(DeviceError) as e:
        choose_code(newer, device(9, 0, driver_version=13000))
    assert e.value.code == CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    assert "ISA version 9.5" in e.value.message and "CUDA 13.0" in e.value.message
    assert choose_code(newer, device(9, 0, driver_version=13050)).ptx == "eighty"
    # An older ISA the driver knows is taken over a newer one it does not.
    assert choose_code(newer + [ptx(75, "seventy-five", version=(8, 8))], device(9, 0)).ptx == "seventy-five"
    # A version no CUDA release has yet is newer than any driver.
    with pytest.raises(DeviceError) as e:
        choose_code([ptx(80, "future", version=(99, 0))], device(9, 0))
    assert e.value.code == CUDA_ERROR_UNSUPPORTED_PTX_VERSION


def test_cubins_run_on_their_major_version_from_their_minor_on():
    assert sorted(choose_code([cubin(80), cubin(90)], device(8, 6)).cubins) == [80]
    assert choose_code([cubin(80), ptx(90, "ninety")], device(8, 6)).ptx is None
    for cc in ((9, 0), (7, 5)):
        with pytest.raises(DeviceError) as e:
            choose_code([cubin(80), cubin(86)], device(*cc))
        assert e.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU
        assert "a cubin for sm_80, a cubin for sm_86" in e.value.message
    with pytest.raises(DeviceError):
        choose_code([cubin(86)], device(8, 0))


def test_nvcc_ptx_for_a_newer_target_on_the_emulator():
    text = compile_ptx(CORPUS_DIR / "saxpy.cu", arch="compute_120")
    assert ".target sm_120" in text
    with pytest.raises(DeviceError) as e:
        module_source(text.encode(), EmulatorBackend(printf_to_stdout=False).describe())
    assert e.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU
    backend = EmulatorBackend(printf_to_stdout=False, compute_capability=(12, 0))
    try:
        registry = ModuleRegistry(backend)
        module = registry.load(text.encode())
        assert registry.function(module.module_id, "saxpy").name == "saxpy"
        assert backend.describe().compute_capability == (12, 0)
    finally:
        backend.close()


def specific(entry: FatbinEntry) -> FatbinEntry:
    """The same entry marked arch-specific (sm_XXa / compute_XXa), as nvcc's flags mark it."""
    from dataclasses import replace
    from ptx_passes.fatbin import ARCH_SPECIFIC_FLAG
    return replace(entry, flags=entry.flags | ARCH_SPECIFIC_FLAG)


def test_arch_specific_code_runs_on_exactly_its_architecture():
    # nvcc -arch=sm_90a writes a generic compute_90 PTX and a compute_90a one
    both = [ptx(90, "generic"), specific(ptx(90, "sm_90a")), specific(cubin(90))]
    assert choose_code(both, device(9, 0)).ptx == "sm_90a"
    assert sorted(choose_code(both, device(9, 0)).cubins) == [90]
    # on another architecture the arch-specific code is not usable; the generic PTX JITs
    assert choose_code(both, device(10, 0)).ptx == "generic"
    assert choose_code(both, device(10, 0)).cubins == {}
    with pytest.raises(DeviceError) as e:
        choose_code([specific(ptx(90, "sm_90a"))], device(10, 0))
    assert e.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU


def test_nvcc_arch_sm_90a_output_loads(nvcc, tmp_path):
    """What `nvcc -arch=sm_90a` builds (sm_90a cubin, compute_90 and compute_90a PTX)
    loads on an emulated 9.0 device, from its compute_90a PTX."""
    import subprocess

    from ptx_passes.fatbin import read_fatbin_entries
    out = tmp_path / "saxpy.fatbin"
    subprocess.run([nvcc, "-fatbin", "-arch=sm_90a", str(CORPUS_DIR / "saxpy.cu"), "-o", str(out)], check=True)
    entries = read_fatbin_entries(out)
    assert {(e.kind, e.arch_specific) for e in entries} >= {("ptx", True), ("ptx", False)}
    chosen = choose_code(entries, device(9, 0))
    assert ".target sm_90a" in chosen.ptx
