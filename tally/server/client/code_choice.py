"""Which code of a module image the device may run, by the driver's rules.

- A cubin runs on devices of its major compute capability whose minor is at
  least its own (sm_80 on 8.0 and 8.6, never on 9.0).
- PTX is JIT-compiled for the device only when its target is not newer than the
  device (compute_120 PTX never runs on a 9.0 device: its code, and the tuning
  a library chose for it on the host, may rely on what the device lacks) and
  the driver knows its ISA version; of several, the newest target that fits.

An image with nothing usable fails to load with CUDA_ERROR_NO_BINARY_FOR_GPU,
or CUDA_ERROR_UNSUPPORTED_PTX_VERSION when it held PTX for the device in an ISA
version newer than the driver's; the message says what the image held and what
the device is. (Loading the wrong PTX anyway once made `cupy.sum` return a
wrong answer without an error.)
"""
from __future__ import annotations

from cuda.bindings.utils import get_minimal_required_cuda_ver_from_ptx_ver

from ptx_passes.fatbin import FatbinEntry, FatbinError, cubins_of, ptx_of, read_fatbin_entries
from tally.backends.base import DeviceDescription, ModuleSource
from tally.jit.ptx_match import captured_ptx
from tally.protocol.errors import (
    CUDA_ERROR_INVALID_IMAGE,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    DeviceError,
)


def module_source(image: bytes, device: DeviceDescription, runs_cubins: bool = True) -> ModuleSource:
    """The image's PTX and cubins the device can use (see the module docstring);
    `runs_cubins` False: a device that runs PTX only (the emulator)."""
    return choose_code(_entries(image), device, image, runs_cubins)


def module_source_with_record(image: bytes, record: bytes, device: DeviceDescription,
                              runs_cubins: bool = True) -> tuple[ModuleSource, str]:
    """As module_source, for a cubin sent with its JIT-capture record: the record's
    PTX counts as the image's own when it matches the cubin (tally/jit/ptx_match.py);
    (the source, "" or why the record was not used)."""
    entries = _entries(image)
    ptx, why = captured_ptx(record, entries)
    if ptx is not None:
        entries = [*entries, ptx]
    try:
        return choose_code(entries, device, image, runs_cubins), why
    except DeviceError as e:
        if why:
            raise DeviceError(e.code, f"{e.message}; a JIT-capture record came with the cubin but was not "
                                      f"used: {why}") from None
        raise


def _entries(image: bytes) -> list[FatbinEntry]:
    try:
        return read_fatbin_entries(image)
    except FatbinError as e:
        raise DeviceError(CUDA_ERROR_INVALID_IMAGE, f"module image not understood: {e}") from None


def choose_code(entries: list[FatbinEntry], device: DeviceDescription, image: bytes = b"",
                runs_cubins: bool = True) -> ModuleSource:
    """What of `entries` (an image's, as ptx_passes reads them) the device can use."""
    arch = device.compute_capability[0] * 10 + device.compute_capability[1]
    ptx_for_device = [e for e in entries if e.kind == "ptx" and e.usable_on(arch)]
    usable_ptx = [e for e in ptx_for_device if ptx_version_supported(e.version, device.driver_version)]
    usable_cubins = [e for e in entries if e.kind == "cubin" and e.usable_on(arch)]
    if not usable_ptx and not (runs_cubins and usable_cubins):
        held = _held(entries, device, runs_cubins)
        if ptx_for_device:
            newest = max(ptx_for_device, key=lambda e: e.version)
            raise DeviceError(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                              f"the module's PTX is ISA version {_version(newest.version)}, newer than this "
                              f"driver ({_driver(device.driver_version)}) loads; {held}")
        raise DeviceError(CUDA_ERROR_NO_BINARY_FOR_GPU, f"no code in the module runs on this device: {held}")
    try:
        ptx = ptx_of(usable_ptx, prefer_arch=arch) if usable_ptx else None
        cubins = cubins_of(usable_cubins)
    except FatbinError as e:
        raise DeviceError(CUDA_ERROR_INVALID_IMAGE, f"module image not understood: {e}") from None
    return ModuleSource(original=image, ptx=ptx, cubins=cubins)


def ptx_version_supported(version: tuple[int, int], driver_version: int) -> bool:
    try:
        needs = get_minimal_required_cuda_ver_from_ptx_ver(_version(version))
    except ValueError:
        return False            # newer than any release cuda-bindings knows
    return needs <= driver_version


def _held(entries: list[FatbinEntry], device: DeviceDescription, runs_cubins: bool) -> str:
    ptx = sorted({(e.arch, e.version) for e in entries if e.kind == "ptx"})
    cubins = sorted({e.arch for e in entries if e.kind == "cubin"})
    parts = [f"PTX for compute_{a} (ISA {_version(v)})" for a, v in ptx] + [f"a cubin for sm_{a}" for a in cubins]
    major, minor = device.compute_capability
    cubin_rule = (f" and cubins for sm_{major}0..sm_{major}{minor}" if runs_cubins
                  else " and no cubins (the emulator runs PTX only)")
    return (f"the image holds {', '.join(parts) or 'no PTX or cubin'}; the device {device.name!r} has compute "
            f"capability {major}.{minor} and runs PTX for compute_{major}{minor} or older up to ISA "
            f"{_newest_isa(device.driver_version)}{cubin_rule} (build for it, e.g. nvcc -gencode "
            f"arch=compute_{major}{minor},code=compute_{major}{minor}; on the emulator, tally-server "
            f"--emulate-cc and --emulate-driver set the compute capability and CUDA version it reports)")


def _newest_isa(driver_version: int) -> str:
    """The newest PTX ISA version a driver of this CUDA version loads ("?" if none is known)."""
    known = [f"{major}.{minor}" for major in range(1, 20) for minor in range(10)
             if ptx_version_supported((major, minor), driver_version)]
    return known[-1] if known else "?"


def _version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def _driver(driver_version: int) -> str:
    return f"CUDA {driver_version // 1000}.{driver_version % 1000 // 10}"
