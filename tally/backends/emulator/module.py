"""A loaded module on the emulator: its parsed PTX, the device memory of its
.global/.const variables (initialized at load, like cuModuleLoad does), and
its kernels, each lowered to an interpreter program at its first launch.

A module of LAZY_BODIES_PTX_BYTES of PTX or more (a library's kernel collection:
CuPy's CUB module is 21 MB in 383 functions) has its function bodies parsed at their
first use (ptx_passes/lazy_bodies.py): its load reads signatures and variables only,
and a launch parses the kernel and what it reaches. A syntax error inside such a body
then fails the launches that reach it (CUDA_ERROR_INVALID_PTX), not the load.
"""
from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass, field

from ptx_passes import PtxParseError, ir, parse_module
from ptx_passes.params import param_bytes, param_layout
from tally._core import emulator as core
from tally.backends.base import KernelParam, ModuleSource
from tally.protocol.errors import (
    CUDA_ERROR_ILLEGAL_INSTRUCTION,
    CUDA_ERROR_INVALID_IMAGE,
    CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
    DeviceError,
)
from tally.backends.emulator.layout import (
    LayoutError,
    encode_initializer,
    function_indices,
    reachable_functions,
    var_align,
    var_size,
)
from tally.backends.emulator.grid_syscalls import provide_grid_syscalls
from tally.backends.emulator.lower_control import HEAP_FUNCTIONS
from tally.backends.clusters import KernelCluster
from tally.backends.emulator.kernel_resources import KernelResources, kernel_resources
from tally.backends.emulator.lowering import LoweredKernel, LoweringError, lower_kernel

LAZY_BODIES_PTX_BYTES = 1 << 20
# a variable declared inside a function body (.global/.const at the start of a statement;
# `ld.global` is no match): such bodies are parsed at load, for the variable's memory
_DECLARES_VARIABLE = re.compile(r"(?:^|[;{}])\s*\.(?:global|const)\b", re.MULTILINE)


@dataclass
class EmulatorFunction:
    """A kernel handle (DeviceBackend Function): name, parameter layout, and the
    lowered program once it has been launched."""

    name: str
    params: tuple[KernelParam, ...]
    param_bytes: int
    module: EmulatorModule = field(repr=False)
    max_threads: int | None = None                        # .maxntid (product)
    required_block: tuple[int, int, int] | None = None    # .reqntid
    cluster: KernelCluster = KernelCluster()              # .reqnctapercluster, .explicitcluster
    _lowered: LoweredKernel | None = field(default=None, repr=False)
    _resources: KernelResources | None = field(default=None, repr=False)
    _error: DeviceError | None = field(default=None, repr=False)
    _uses_heap: bool | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def uses_device_heap(self) -> bool:
        """The kernel (or a function it reaches) calls device-side malloc or free."""
        if self._uses_heap is None:
            with _body_errors(self.name):
                reached = reachable_functions(self.module.ir, self.module.ir.function(self.name))
                self._uses_heap = any(not f.has_body and f.name in HEAP_FUNCTIONS for f in reached)
        return self._uses_heap

    def resources(self) -> KernelResources:
        """What the kernel needs (cuFuncGetAttribute), read from its PTX once; known
        whether or not the emulator can run it."""
        if self._resources is None:
            with _body_errors(self.name):
                self._resources = kernel_resources(self.module.ir, self.module.ir.function(self.name))
        return self._resources

    def lowered(self) -> LoweredKernel:
        """The interpreter program; lowered once, at the first launch. A kernel the
        emulator cannot run fails every launch with CUDA_ERROR_ILLEGAL_INSTRUCTION."""
        with self._lock:
            if self._lowered is None and self._error is None:
                try:
                    self._lowered = lower_kernel(self.module.ir, self.name, self.module.addresses)
                except LoweringError as e:
                    self._error = DeviceError(CUDA_ERROR_ILLEGAL_INSTRUCTION, f"kernel {self.name}: {e}")
                except PtxParseError as e:      # a body parsed at its first use (LAZY_BODIES_PTX_BYTES)
                    self._error = _unparsed_body(self.name, e)
            if self._error is not None:
                raise self._error
            return self._lowered


class EmulatorModule:
    def __init__(self, source: ModuleSource, memory, addresses: dict[str, int] | None = None):
        if source.ptx is None:
            if source.cubins:
                archs = ", ".join(f"sm_{a}" for a in sorted(source.cubins))
                raise DeviceError(CUDA_ERROR_NO_BINARY_FOR_GPU,
                                  f"the emulator runs PTX, and this module holds only cubins ({archs}); "
                                  "build the program with PTX (e.g. nvcc -gencode arch=compute_90,code=compute_90)")
            raise DeviceError(CUDA_ERROR_INVALID_IMAGE, "module image holds neither PTX nor a cubin")
        try:
            self.ir = parse_module(provide_grid_syscalls(source.ptx), "<module>",
                                   lazy_bodies=len(source.ptx) >= LAZY_BODIES_PTX_BYTES)
        except PtxParseError as e:
            raise DeviceError(CUDA_ERROR_INVALID_PTX, f"module PTX does not parse: {e}") from None
        self._memory = memory
        # What its kernels' malloc/free allocate from (a core.DeviceHeap): the job's,
        # attached by the server before the first launch that needs it.
        self.heap = None
        self.evicted = False          # its globals' memory was given back (a suspended job's)
        self.globals: dict[str, tuple[int, int]] = {}
        self.functions: dict[str, EmulatorFunction] = {}
        self._by_index: dict[int, str] | None = None    # function index -> name (kernel_at)
        try:
            self._allocate_globals(addresses or {})
            for fn in self.ir.entries():
                layout = tuple(KernelParam(s.offset, s.size, s.align) for s in param_layout(fn))
                self.functions[fn.name] = EmulatorFunction(fn.name, layout, param_bytes(fn), self,
                                                           *_block_limits(fn), KernelCluster.of(fn))
        except (LayoutError, ValueError) as e:
            self.unload()
            raise DeviceError(CUDA_ERROR_INVALID_PTX, f"module PTX cannot be loaded: {e}") from None

    def kernel_at(self, index: int) -> EmulatorFunction | None:
        """The kernel whose function pointer is CODE_WINDOW + index (a device-side
        launch names its kernel so), or None where that function is not a kernel."""
        if self._by_index is None:
            self._by_index = {i: name for name, i in function_indices(self.ir).items()}
        return self.functions.get(self._by_index.get(index, ""))

    @property
    def addresses(self) -> dict[str, int]:
        return {name: ptr for name, (ptr, _size) in self.globals.items()}

    def _variables(self) -> list[ir.VarDecl]:
        """Module-scope .global/.const variables with storage here (not `.extern`)."""
        out = [g for g in self.ir.globals() if g.space in ("global", "const") and "extern" not in g.linkage]
        for fn in self.ir.functions():
            if isinstance(fn, ir.LazyFunction) and not fn.is_parsed and not _DECLARES_VARIABLE.search(fn.body_text):
                continue                 # left unparsed: it declares no variable
            if fn.body is not None:
                for _b, _i, s in ir.iter_statements(fn.body):
                    if isinstance(s, ir.VarDecl) and s.space in ("global", "const"):
                        out.append(s)
        return out

    def _allocate_globals(self, addresses: dict[str, int]) -> None:
        """Each variable gets its own allocation; at `addresses[name]` where given
        (a migrated job's module, whose kernels' pointers must stay valid)."""
        variables = self._variables()
        for v in variables:
            size = var_size(v)
            at = addresses.get(v.name)
            if at is None:
                ptr = self._memory.allocate(max(size, 1), max(var_align(v), 256))
            else:
                self._memory.allocate_at(at, max(size, 1))
                ptr = at
            self.globals[v.name] = (ptr, size)

        functions = function_indices(self.ir)

        def address_of(name: str) -> int:
            if name in self.globals:
                return self.globals[name][0]
            if name in functions:
                return core.CODE_WINDOW + functions[name]
            raise LayoutError(f"an initializer refers to {name}, which is neither a .global/.const variable "
                              "nor a function of this module")

        for v in variables:
            data = encode_initializer(v, address_of)
            if data:
                self._memory.write(self.globals[v.name][0], data)

    def unload(self) -> None:
        self.heap = None
        if not self.evicted:
            for ptr, _size in self.globals.values():
                self._memory.free(ptr)
        self.globals.clear()

    def evict(self) -> None:
        """Free the globals' memory (the caller saved their bytes); kernels keep their addresses."""
        if not self.evicted:
            for ptr, _size in self.globals.values():
                self._memory.free(ptr)
            self.evicted = True

    def restore(self) -> None:
        """Allocate the globals again at their addresses; all or none."""
        if not self.evicted:
            return
        done = []
        try:
            for ptr, size in self.globals.values():
                self._memory.allocate_at(ptr, max(size, 1))
                done.append(ptr)
        except BaseException:
            for ptr in done:
                self._memory.free(ptr)
            raise
        self.evicted = False


def _block_limits(fn: ir.Function) -> tuple[int | None, tuple[int, int, int] | None]:
    """(.maxntid thread count, .reqntid block shape) of a kernel; a launch outside them fails."""
    def dims(name):
        d = fn.directive(name)
        if d is None:
            return None
        values = [int(a) for a in d.args] + [1, 1]
        return tuple(values[:3])
    maxntid, reqntid = dims("maxntid"), dims("reqntid")
    return (maxntid[0] * maxntid[1] * maxntid[2] if maxntid else None), reqntid


def _unparsed_body(kernel: str, e: PtxParseError) -> DeviceError:
    return DeviceError(CUDA_ERROR_INVALID_PTX, f"kernel {kernel}: the module's PTX does not parse: {e}")


@contextlib.contextmanager
def _body_errors(kernel: str):
    """A body parsed at its first use that does not parse: the kernel's error."""
    try:
        yield
    except PtxParseError as e:
        raise _unparsed_body(kernel, e) from None
