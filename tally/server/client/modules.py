"""A client's loaded modules and resolved functions.

The client sends module images (fatbin, cubin or PTX; cudart's fatbin wrapper is
unwrapped by the client); the registry takes them apart with ptx_passes, loads
them on the backend and hands out ids for modules and functions. It also
answers where a backend Function comes from (`origin`).

A bare cubin may come with a JIT-capture record (tally/jit/): the PTX a JIT
compiler of the job assembled it from. When it matches the cubin the module
counts as one with PTX (`ptx_origin` "jit"): transformed for best-effort jobs,
emulated on the emulator; a backend that runs cubins still loads the cubin when
no transform is made. A record that does not match is dropped, with a warning.

For a best-effort job (a registry made with a variant provider) a module with
PTX is loaded as the provider's prepared text: the original kernels plus their
sliced and PTB versions in one module (tally/backends/ptx_variants.py), and
each resolved kernel's variants are registered with the provider.
"""
from __future__ import annotations

import bisect
import logging
import itertools
import threading
from dataclasses import dataclass, field

from ptx_passes.variants import VariantsResult
from tally.scheduler.variants import PTBVariant, SlicedVariant
from tally.server.client.code_choice import module_source, module_source_with_record
from tally.server.client.graph_conditions import with_own_set_conditional
from tally.backends.base import KernelParam, ModuleSource
from tally.protocol.errors import (
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    DeviceError,
)

log = logging.getLogger("tally.server")

# A module image (or a link's inputs) is held in memory while it loads; beyond this a client is confused.
MAX_IMAGE_BYTES = 1 << 30


@dataclass(eq=False)
class LoadedModule:
    module_id: int
    backend_module: object
    source: ModuleSource
    functions: dict[str, LoadedFunction] = field(default_factory=dict)
    globals: dict[str, tuple[int, int]] = field(default_factory=dict)
    kernel_facts: dict | None = None     # name -> cubin KernelInfo, read once on demand
    variants: VariantsResult | None = None   # set when the module was loaded with its variants
    ptx_origin: str = "none"         # where its PTX came from: "image", "jit" (a capture record), "none"
    jit_record: bytes = b""          # the record it was loaded with, when used (a migration carries it)


@dataclass(eq=False)
class LoadedFunction:
    function_id: int
    name: str
    module: LoadedModule
    backend_function: object

    param_bytes: int = 0    # size of the parameter block a launch must carry

    def __post_init__(self):
        self.param_bytes = max((p.offset + p.size for p in self.backend_function.params), default=0)

    @property
    def params(self) -> tuple[KernelParam, ...]:
        return tuple(self.backend_function.params)


class ModuleRegistry:
    def __init__(self, backend, variant_provider=None, on_forget=None):
        self.backend = backend
        # Told the function ids that stop naming kernels (the C++ data plane's table drops them).
        self._on_forget = on_forget
        # PtxVariantProvider (tally/backends/ptx_variants.py) for best-effort jobs, else None;
        # a backend that models variants itself (the sim) has nothing to build at load.
        self.variant_provider = variant_provider if backend.traits.variants_from_ptx else None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._modules: dict[int, LoadedModule] = {}
        self._functions: dict[int, LoadedFunction] = {}
        # Changes whenever a function id starts or stops naming a loaded function (or
        # names one loaded again): what a cached replay graph checks (graphs.py).
        self.version = 0
        self._origins: dict[int, LoadedFunction] = {}     # id(backend function) -> ours
        self._global_starts: list[int] = []               # sorted, for ownership checks
        self._global_sizes: dict[int, int] = {}
        self._detached: list[LoadedModule] = []           # unloaded by the client, awaiting release
        self._refused_records = 0                         # JIT-capture records that did not match

    def load(self, image: bytes, jit_record: bytes = b"") -> LoadedModule:
        source, origin = self._source(image, jit_record)
        backend_module, variants = self._load_backend(source, origin=origin)
        with self._lock:
            module = LoadedModule(next(self._ids), backend_module, source, variants=variants, ptx_origin=origin,
                                  jit_record=jit_record if origin == "jit" else b"")
            self._refused_records += bool(jit_record) and origin != "jit"
            self._modules[module.module_id] = module
        return module

    def load_at(self, module_id: int, image: bytes, addresses: dict[str, int], functions: dict[str, int],
                resolved: dict[str, tuple[int, int]], jit_record: bytes = b"") -> LoadedModule:
        """A migrated job's module (tally/server/migration_import.py): loaded with its
        globals at `addresses`, under the ids it had, its kernels resolved under
        theirs and its globals as the job looked them up."""
        source, origin = self._source(image, jit_record)
        backend_module, variants = self._load_backend(source, addresses, origin)
        module = LoadedModule(module_id, backend_module, source, variants=variants, ptx_origin=origin,
                              jit_record=jit_record if origin == "jit" else b"")
        try:
            for fn_name, function_id in functions.items():
                backend_fn = self.backend.module_function(backend_module, fn_name)
                fn = LoadedFunction(function_id, fn_name, module, backend_fn)
                module.functions[fn_name] = fn
        except DeviceError:
            self.backend.module_unload(backend_module)
            raise
        with self._lock:
            self._modules[module_id] = module
            self.version += 1
            for fn in module.functions.values():
                self._functions[fn.function_id] = fn
                self._origins[id(fn.backend_function)] = fn
            for var, (ptr, size) in resolved.items():
                module.globals[var] = (ptr, size)
                if ptr not in self._global_sizes:
                    bisect.insort(self._global_starts, ptr)
                self._global_sizes[ptr] = size
        if variants is not None:
            for fn in module.functions.values():
                self._register_variants(module, fn)
        return module

    def continue_ids(self, next_id: int) -> None:
        """Ids handed out from now on start at next_id (a migrated job's continue)."""
        with self._lock:
            self._ids = itertools.count(next_id)

    def _source(self, image: bytes, jit_record: bytes = b"") -> tuple[ModuleSource, str]:
        """The module's source and where its PTX came from ("image", "jit", "none"),
        with tally's cudaGraphSetConditional where its kernels set graph conditions."""
        source, origin = self._chosen_source(image, jit_record)
        return with_own_set_conditional(source, self.backend.traits.runs_cubins), origin

    def _chosen_source(self, image: bytes, jit_record: bytes) -> tuple[ModuleSource, str]:
        device, runs_cubins = self.backend.describe(), self.backend.traits.runs_cubins
        try:
            if not jit_record:
                source = module_source(image, device, runs_cubins)
                return source, "none" if source.ptx is None else "image"
            source, refused = module_source_with_record(image, jit_record, device, runs_cubins)
            if refused:
                log.warning("a JIT-capture record was not used; the module is its cubin alone: %s", refused)
            elif source.ptx is None:
                log.info("a JIT-capture record matched its cubin, but its PTX does not run on this device; "
                         "the module is its cubin alone")
            else:
                log.info("a cubin's PTX came from JIT capture (%d bytes of PTX)", len(source.ptx))
            return source, "jit" if source.ptx is not None and not refused else "none"
        except DeviceError as e:
            if e.code in (CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_UNSUPPORTED_PTX_VERSION):
                log.warning("a module failed to load: %s", e.message)
            raise

    def _load_backend(self, source: ModuleSource, addresses: dict[str, int] | None = None, origin: str = ""):
        """(backend module, its variants or None); globals at `addresses` when given."""
        def load(src: ModuleSource):
            if addresses is None:
                return self.backend.module_load(src)
            return self.backend.module_load_at(src, addresses)

        variants = None
        if self.variant_provider is not None and source.ptx is not None:
            variants = self.variant_provider.prepare(source.ptx)
        backend_module = None
        if variants is not None:
            # Loaded from the transformed text only (no original image, no cubins), so the
            # cuda backend JIT-compiles originals and variants into one module.
            try:
                backend_module = load(ModuleSource(original=b"", ptx=variants.ptx))
            except DeviceError as e:
                # The job's own image still runs: its kernels just stay untransformed.
                log.warning("the device refused the module with sliced/PTB variants (%s); "
                            "loading the job's own image", e)
                variants = None
        if backend_module is None:
            if origin == "jit" and self.backend.traits.runs_cubins and source.cubins:
                # untransformed, a JIT-compiled kernel runs as its compiler built it
                source = ModuleSource(original=source.original, cubins=source.cubins)
            backend_module = load(source)
        return backend_module, variants

    def unload(self, module_id: int) -> None:
        self.release(self.detach(module_id))

    def detach(self, module_id: int) -> LoadedModule:
        """cuModuleUnload, first half: the module's id, functions and globals stop
        naming anything for the client. Launches already queued keep running on it;
        `release` unloads it from the backend once they are done."""
        with self._lock:
            module = self._module(module_id)
            del self._modules[module_id]
            self._detached.append(module)
            self.version += 1
            for fn in module.functions.values():
                self._functions.pop(fn.function_id, None)
            for ptr, _size in module.globals.values():
                self._drop_global(ptr)
        if self._on_forget is not None:
            self._on_forget([fn.function_id for fn in module.functions.values()])
        return module

    def release(self, module: LoadedModule) -> None:
        """Unload a detached module from the backend (its queued work has completed)."""
        with self._lock:
            if module not in self._detached:
                return                    # clear() released it already
            self._detached.remove(module)
            self._forget_functions(module)
        self.backend.module_unload(module.backend_module)

    def _forget_functions(self, module: LoadedModule) -> None:
        for fn in module.functions.values():
            self._origins.pop(id(fn.backend_function), None)
            if self.variant_provider is not None:
                self.variant_provider.forget(fn.backend_function)

    def function(self, module_id: int, name: str) -> LoadedFunction:
        with self._lock:
            module = self._module(module_id)
            fn = module.functions.get(name)
        if fn is not None:
            return fn
        backend_fn = self.backend.module_function(module.backend_module, name)
        with self._lock:
            fn = module.functions.get(name)
            if fn is None:
                fn = LoadedFunction(next(self._ids), name, module, backend_fn)
                module.functions[name] = fn
                self._functions[fn.function_id] = fn
                self.version += 1
                self._origins[id(backend_fn)] = fn
                register = True
            else:
                register = False
        if register and module.variants is not None:
            self._register_variants(module, fn)
        return fn

    def _register_variants(self, module: LoadedModule, fn: LoadedFunction) -> None:
        plans = module.variants.kernels.get(fn.name)
        if plans is None:
            return
        sliced = ptb = None
        if plans.sliced is not None:
            sliced = SlicedVariant(plans.sliced, self.backend.module_function(module.backend_module,
                                                                               plans.sliced.name))
        if plans.ptb is not None:
            ptb = PTBVariant(plans.ptb, self.backend.module_function(module.backend_module, plans.ptb.name))
        self.variant_provider.register(fn.backend_function, sliced, ptb)

    def launchable(self, function_id: int) -> LoadedFunction:
        try:
            return self._functions[function_id]
        except KeyError:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE,
                              f"function {function_id} was never resolved or its module is unloaded") from None

    def global_variable(self, module_id: int, name: str) -> tuple[int, int]:
        with self._lock:
            module = self._module(module_id)
            found = module.globals.get(name)
        if found is not None:
            return found
        ptr, size = self.backend.module_global(module.backend_module, name)
        with self._lock:
            if name not in module.globals:
                module.globals[name] = (ptr, size)
                if ptr not in self._global_sizes:
                    bisect.insort(self._global_starts, ptr)
                self._global_sizes[ptr] = size
        return ptr, size

    def global_contains(self, ptr: int, nbytes: int) -> bool:
        with self._lock:
            i = bisect.bisect_right(self._global_starts, ptr) - 1
            if i < 0:
                return False
            start = self._global_starts[i]
            return ptr + nbytes <= start + self._global_sizes[start]

    def ptx_sources(self) -> dict:
        """Where the PTX of the job's loaded modules came from, by module and by resolved
        kernel ("image", "jit", "none"), and how many capture records were refused."""
        with self._lock:
            modules = list(self._modules.values())
            refused = self._refused_records
        by_module = {"image": 0, "jit": 0, "none": 0}
        by_kernel = dict(by_module)
        for module in modules:
            by_module[module.ptx_origin] += 1
            by_kernel[module.ptx_origin] += len(module.functions)
        return {"modules": by_module, "kernels": by_kernel, "jit_records_refused": refused}

    def origin(self, backend_function) -> LoadedFunction | None:
        """Our record of a backend Function (its module's source, its name)."""
        return self._origins.get(id(backend_function))

    def clear(self) -> None:
        with self._lock:
            modules = [*self._modules.values(), *self._detached]
            if self._on_forget is not None:
                self._on_forget(list(self._functions))
            for module in modules:
                self._forget_functions(module)
            self._modules.clear()
            self._detached.clear()
            self._functions.clear()
            self.version += 1
            self._origins.clear()
            self._global_starts.clear()
            self._global_sizes.clear()
        for module in modules:
            try:
                self.backend.module_unload(module.backend_module)
            except DeviceError:
                pass   # the client is gone; the module goes with the backend's context

    def next_id(self) -> int:
        """The id the next module or function will get (a migrated job's ids continue from it)."""
        with self._lock:
            ahead = next(self._ids)
            self._ids = itertools.count(ahead)
            return ahead

    def loaded(self) -> list[LoadedModule]:
        """Every module on the backend now: loaded, or unloaded by the client and awaiting release."""
        with self._lock:
            return [*self._modules.values(), *self._detached]

    def _module(self, module_id: int) -> LoadedModule:
        module = self._modules.get(module_id)
        if module is None:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"module {module_id} was never loaded or is unloaded")
        return module

    def _drop_global(self, ptr: int) -> None:
        if self._global_sizes.pop(ptr, None) is not None:
            self._global_starts.pop(bisect.bisect_left(self._global_starts, ptr))
