"""The cuda backend's module variables at addresses tally controls
(`tally-server --suspendable`), so they can be suspended and migrated like
allocations.

A driver places a module's `.global` and `.const` variables itself when it loads
the module, and a reload (on resume, or on another server) would put them
elsewhere while the job holds their addresses. So a module with variables is
loaded in its relocated form (ptx_passes/passes/relocate_globals.py): its
variables live in one virtual-memory reservation of the backend's own
(cuda_restore.py: the same kind every job allocation gets), and the module reads
their addresses from a small `.const` table the backend fills in after the load.
cuModuleGetGlobal's answers (module_global) are those addresses. The backend can
then release the block's physical memory and map it again at the same address
(suspend/resume), and reserve the block at the same address in another process
(a migration's target, module_load_at: the reservation's address hint, checked).

Why this rather than the alternatives weighed (docs/cuda-globals.md has the whole
reasoning): the driver's CU_JIT_GLOBAL_SYMBOL_ADDRESSES relocates unresolved
extern variables to given addresses, but is documented for the linker only and
its behaviour with device addresses could not be verified without a GPU; the
indirection needs nothing but PTX that ptxas checks and the emulator runs, and
the same two documented calls (cuModuleGetGlobal, cuMemcpyHtoD) on every driver.

Left where the driver puts them (the module is "pinned": its variables stay on
the device while its job is suspended, and the job cannot migrate; the reason is
kept and given): modules that come only as cubins and have variables, modules
the relocation pass refuses (it says why), and modules whose relocated PTX the
driver will not compile. Modules without variables load as they are, at no cost.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from cuda.bindings import driver as cu

from ptx_passes import PtxParseError
from ptx_passes.cubin_info import CubinError, variable_names
from ptx_passes.passes import PassRefused
from tally.backends.base import VMM_GRANULARITY, ModuleSource, vmm_granular
from tally.backends.emulator.layout import LayoutError
from tally.backends.relocated_globals import RelocatedModule, has_variables, relocate
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError


@dataclass
class ModuleStorage:
    """A relocated module's variables: the reservations holding them (each a
    `_backed` entry of the backend) and each variable's (address, bytes)."""

    ranges: list[tuple[int, int]] = field(default_factory=list)
    variables: dict[str, tuple[int, int]] = field(default_factory=dict)


def relocation_of(source: ModuleSource) -> tuple[RelocatedModule | None, str | None]:
    """(the relocated module, None), or (None, why its variables must stay where the
    driver puts them), or (None, None) for a module without variables."""
    if source.ptx is None:
        try:
            names = sorted({n for cubin in source.cubins.values() for n in variable_names(cubin)})
        except CubinError as e:
            return None, f"it comes only as cubins, and one cannot be read for its variables ({e})"
        if names:
            return None, (f"it comes only as cubins and has variables ({', '.join(names[:4])}"
                          f"{', ...' if len(names) > 4 else ''}), which only PTX lets tally place")
        return None, None
    if not has_variables(source.ptx):
        return None, None
    try:
        return relocate(source.ptx), None
    except PassRefused as e:
        return None, f"its variables cannot be relocated: {e}"
    except (PtxParseError, LayoutError) as e:
        return None, f"its PTX cannot be relocated: {e}"


class CudaRelocatedGlobals:
    """Mixed into CudaBackend (through CudaAddressRestore); uses its `_backed_alloc`,
    `_backed_alloc_at`, `_backed_free`, `_current` and `_check`."""

    def _load_relocated(self, relocated: RelocatedModule, addresses: dict[str, int] | None):
        """(driver module handle, ModuleStorage) of a relocated module, its variables placed
        (at `addresses` when given), initialized and entered in its table."""
        self._current()
        handle = self._check(cu.cuModuleLoadData(relocated.ptx.encode() + b"\0"))
        try:
            storage = self._place(relocated, addresses)
            try:
                where = {name: ptr for name, (ptr, _size) in storage.variables.items()}
                for name, data in relocated.initial_bytes(where).items():
                    self._write(where[name], data)
                table, _size = self._check(cu.cuModuleGetGlobal(handle, relocated.table.encode()))
                self._write(int(table), relocated.table_bytes(where))
                # From pageable memory cuMemcpyHtoD may return before its DMA ends, and the
                # module's kernels run on non-blocking streams: wait for the copies here.
                self._check(cu.cuStreamSynchronize(0))
            except DeviceError:
                self._free_storage(storage)
                raise
        except DeviceError:
            cu.cuModuleUnload(handle)
            raise
        return handle, storage

    def _write(self, ptr: int, data: bytes) -> None:
        if data:
            host = np.frombuffer(data, dtype=np.uint8)
            self._check(cu.cuMemcpyHtoD(ptr, host.ctypes.data, len(data)))

    def _place(self, relocated: RelocatedModule, addresses: dict[str, int] | None) -> ModuleStorage:
        if addresses is None:
            base = self._backed_alloc(relocated.nbytes)
            where = relocated.addresses(base)
            return ModuleStorage([(base, vmm_granular(relocated.nbytes))],
                                 {v.name: (where[v.name], v.size) for v in relocated.variables})
        sizes = {v.name: v.size for v in relocated.variables}
        if set(addresses) != set(sizes):
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"the module's variables ({', '.join(sorted(addresses))}) are not those this server "
                              f"places for it ({', '.join(sorted(sizes))})")
        storage = ModuleStorage(variables={n: (addresses[n], sizes[n]) for n in sizes})
        try:
            for base, size in _granule_runs(storage.variables.values()):
                self._backed_alloc_at(base, size)
                storage.ranges.append((base, size))
        except DeviceError:
            self._free_storage(storage)
            raise
        return storage

    def _free_storage(self, storage: ModuleStorage) -> None:
        for base, _size in storage.ranges:
            self._backed_free(base)
        storage.ranges.clear()

    def _evict_storage(self, storage: ModuleStorage) -> None:
        for base, _size in storage.ranges:
            self.mem_evict(base)

    def _restore_storage(self, storage: ModuleStorage) -> None:
        """All of the block back at its addresses, or none of it."""
        done = []
        try:
            for base, size in storage.ranges:
                self.mem_alloc_at(base, size)
                done.append(base)
        except DeviceError:
            for base in done:
                self.mem_evict(base)
            raise


def _granule_runs(variables) -> list[tuple[int, int]]:
    """The runs of whole granules that cover every (address, bytes): one reservation each."""
    granules = set()
    for ptr, size in variables:
        granules.update(range(ptr // VMM_GRANULARITY, (ptr + max(size, 1) - 1) // VMM_GRANULARITY + 1))
    runs: list[list[int]] = []
    for g in sorted(granules):
        if runs and runs[-1][1] == g:
            runs[-1][1] = g + 1
        else:
            runs.append([g, g + 1])
    return [(start * VMM_GRANULARITY, (end - start) * VMM_GRANULARITY) for start, end in runs]
