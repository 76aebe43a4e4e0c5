"""Is a JIT-capture record the PTX of the cubin the job loads? The server asks here.

A record is used only when all of these hold, else the module is the cubin alone
and the reason is logged:
- the image is one cubin with no PTX of its own (an image that carries PTX needs
  no record);
- the record decodes and its SHA-256 is the cubin's (the file name is only a key);
- the PTX parses, and its `.entry` kernels are the cubin's kernels, by name, with
  the same parameter layout (offset and size of each parameter). The one exception:
  kernels of the device runtime's own (libcudadevrt's file-static helpers, which a
  linker that keeps the library's whole objects, as nvJitLink does, leaves in the
  cubin where tally's linker keeps only what the program reaches) may be in the cubin
  alone: no job can name them.
"""
from __future__ import annotations

import hashlib

from ptx_passes.cubin_info import kernel_params
from ptx_passes.errors import PtxParseError
from ptx_passes.fatbin import FatbinEntry, read_fatbin_entries
from ptx_passes.params import param_layout
from ptx_passes.parser import parse_module
from tally.jit.records import RecordError, decode


def captured_ptx(record: bytes, entries: list[FatbinEntry]) -> tuple[FatbinEntry | None, str]:
    """(the record's PTX as an image entry, "") when it may be used, else (None, why not)."""
    cubins = [e for e in entries if e.kind == "cubin"]
    if any(e.kind == "ptx" for e in entries):
        return None, "the image carries PTX of its own"
    if len(cubins) != 1:
        return None, f"the image holds {len(cubins)} cubins; a record belongs to exactly one"
    cubin = cubins[0].payload
    try:
        rec = decode(record)
    except RecordError as e:
        return None, str(e)
    sha = hashlib.sha256(cubin).hexdigest()
    if rec.cubin_sha256 != sha:
        return None, f"the record was made for another cubin (SHA-256 {rec.cubin_sha256[:12]}..., " \
                     f"the loaded cubin's is {sha[:12]}...)"
    why = mismatch(rec.ptx, cubin)
    if why:
        return None, why
    try:
        (ptx_entry,) = read_fatbin_entries(rec.ptx.encode())
    except ValueError as e:
        return None, f"the record's PTX has no .version/.target header ({e})"
    return ptx_entry, ""


def mismatch(ptx: str, cubin: bytes) -> str:
    """Why `ptx` is not the source of `cubin` ("" when its kernels match)."""
    try:
        module = parse_module(ptx, "<jit record>")
    except PtxParseError as e:
        return f"the record's PTX does not parse: {e}"
    try:
        in_cubin = kernel_params(cubin)
    except ValueError as e:              # CubinError, or the ELF reader's own
        return f"the cubin's kernels cannot be read: {e}"
    in_ptx = {}
    for entry in module.entries():
        try:
            in_ptx[entry.name] = [(slot.offset, slot.size) for slot in param_layout(entry)]
        except ValueError as e:
            return f"kernel {entry.name} of the record's PTX has no parameter layout: {e}"
    only_ptx = sorted(set(in_ptx) - set(in_cubin))
    only_cubin = sorted(name for name in set(in_cubin) - set(in_ptx) if not _device_runtime_internal(name))
    if only_ptx or only_cubin:
        return f"the record's kernels differ from the cubin's (only in the PTX: {_names(only_ptx)}; " \
               f"only in the cubin: {_names(only_cubin)})"
    for name, layout in in_ptx.items():
        if list(map(tuple, in_cubin[name])) != layout:
            return f"kernel {name}'s parameters differ: the PTX lays them out as {layout}, " \
                   f"the cubin as {list(map(tuple, in_cubin[name]))}"
    return ""


def _device_runtime_internal(name: str) -> bool:
    """A kernel of libcudadevrt's own translation unit, file-static (nvcc names such a kernel
    __nv_static_<n>__<hash>_<length>_cuda_device_runtime_cu_...)."""
    return name.startswith("__nv_static_") and "_cuda_device_runtime_cu_" in name


def _names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") if names else "none"
