"""Modeled kernel variants for the `sim` backend: the VariantProvider the
executor uses when the device is simulated. A sim kernel is transformable
unless its cost says otherwise (cubin-only kernels); the variant functions run
with the same per-block cost plus the transformation's overhead (model.py)."""
from __future__ import annotations

import dataclasses

from ptx_passes.launch_plan import PTB_EXTRA, SLICE_EXTRA, PTBKernel, SlicedKernel, extra_params_offset
from tally.backends.base import Function, KernelParam
from tally.backends.sim.objects import SimFunction
from tally.scheduler.run_mode import RunMode
from tally.scheduler.variants import PTBVariant, SlicedVariant


class SimVariantProvider:
    def __init__(self) -> None:
        # keyed by the function object itself (sim functions hash by identity)
        self._sliced: dict[Function, SlicedVariant | None] = {}
        self._ptb: dict[Function, PTBVariant | None] = {}

    @staticmethod
    def _transformable(fn: Function) -> bool:
        # a kernel whose parameter layout is unknown cannot get extra parameters
        return (isinstance(fn, SimFunction) and fn.kind is RunMode.WHOLE and fn.params_known
                and fn.cost.transformable)

    @staticmethod
    def _variant_function(fn: SimFunction, kind: RunMode, extra_size: int) -> SimFunction:
        extra = KernelParam(extra_params_offset(fn.original_param_bytes), extra_size, 8)
        return dataclasses.replace(fn, name=f"{fn.name}__tally_{kind.value}", kind=kind, original=fn,
                                   params=fn.params + (extra,))

    def sliced(self, fn: Function) -> SlicedVariant | None:
        key = fn
        if key not in self._sliced:
            variant = None
            if self._transformable(fn):
                vfn = self._variant_function(fn, RunMode.SLICE, SLICE_EXTRA.size)
                variant = SlicedVariant(SlicedKernel(vfn.name, fn.name, fn.original_param_bytes), vfn)
            self._sliced[key] = variant
        return self._sliced[key]

    def ptb(self, fn: Function) -> PTBVariant | None:
        key = fn
        if key not in self._ptb:
            variant = None
            if self._transformable(fn):
                vfn = self._variant_function(fn, RunMode.PTB, PTB_EXTRA.size)
                variant = PTBVariant(PTBKernel(vfn.name, fn.name, fn.original_param_bytes), vfn)
            self._ptb[key] = variant
        return self._ptb[key]
