"""Sliced and PTB versions of the kernels jobs load, built by the PTX passes.

This is the executor's VariantProvider on the real server (the sim backend has
its own modeled one). When a best-effort job loads a module that carries PTX,
the module handlers call `register(function, ptx)` for each kernel it
resolves; the first registration of a PTX text runs ptx_passes.variants (or
takes the result from its on-disk cache) and loads the one module holding the
sliced and PTB entries into the backend. Identical PTX from several jobs or
restarts is transformed and loaded once per server.

Registration happens on the job's own session thread while it waits for its
module to load, so the executor, which asks `sliced()`/`ptb()` under its lock,
never waits for a transformation; answers never change once given.
"""
from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass

from ptx_passes import PtxParseError
from ptx_passes.variants import VariantsResult, build_variants
from tally.backends.base import DeviceError, Function, ModuleSource
from tally.scheduler.variants import PTBVariant, SlicedVariant

log = logging.getLogger("tally.server")


@dataclass
class _LoadedVariants:
    result: VariantsResult
    module: object                       # the backend module holding the variant entries
    functions: dict[str, Function]       # variant entry name -> backend function


class PtxVariantProvider:
    def __init__(self, backend):
        self._backend = backend
        self._lock = threading.Lock()
        self._modules: dict[str, _LoadedVariants | None] = {}   # sha256 of PTX -> variants (None: failed)
        # id(function) -> (function, sliced, ptb); the function is kept so its id is not reused
        self._answers: dict[int, tuple[Function, SlicedVariant | None, PTBVariant | None]] = {}

    def register(self, function: Function, ptx: str | None) -> None:
        """Make the variants of `function` (a kernel of a module whose PTX is `ptx`) known."""
        sliced = ptb = None
        if ptx is not None:
            loaded = self._variants_of(ptx)
            if loaded is not None and function.name in loaded.result.kernels:
                plans = loaded.result.kernels[function.name]
                if plans.sliced is not None:
                    sliced = SlicedVariant(plans.sliced, loaded.functions[plans.sliced.name])
                if plans.ptb is not None:
                    ptb = PTBVariant(plans.ptb, loaded.functions[plans.ptb.name])
                for pass_name, reasons in plans.reasons.items():
                    log.info("kernel %s has no %s variant: %s", function.name, pass_name, "; ".join(reasons))
        with self._lock:
            self._answers.setdefault(id(function), (function, sliced, ptb))

    def forget(self, function: Function) -> None:
        with self._lock:
            self._answers.pop(id(function), None)

    def sliced(self, function: Function) -> SlicedVariant | None:
        entry = self._answers.get(id(function))
        return entry[1] if entry is not None and entry[0] is function else None

    def ptb(self, function: Function) -> PTBVariant | None:
        entry = self._answers.get(id(function))
        return entry[2] if entry is not None and entry[0] is function else None

    def _variants_of(self, ptx: str) -> _LoadedVariants | None:
        key = hashlib.sha256(ptx.encode()).hexdigest()
        with self._lock:
            if key in self._modules:
                return self._modules[key]
        loaded = None
        try:
            result = build_variants(ptx, "<job module>")
            names = [v.name for plans in result.kernels.values() for v in (plans.sliced, plans.ptb)
                     if v is not None]
            if names:
                module = self._backend.module_load(ModuleSource(original=b"", ptx=result.ptx))
                loaded = _LoadedVariants(result, module,
                                         {n: self._backend.module_function(module, n) for n in names})
        except (PtxParseError, DeviceError) as e:
            # The job's kernels still run, whole; only their transformed versions are missing.
            log.warning("cannot build sliced/PTB variants of a module: %s", e)
        with self._lock:
            return self._modules.setdefault(key, loaded)

    def close(self) -> None:
        with self._lock:
            modules = [m for m in self._modules.values() if m is not None]
            self._modules.clear()
            self._answers.clear()
        for m in modules:
            try:
                self._backend.module_unload(m.module)
            except DeviceError:
                pass
