"""Sliced and PTB versions of best-effort jobs' kernels, built by the PTX passes:
the variant provider of every backend that runs the jobs' own code (cuda,
emulator, null; they mix in PtxVariants).

When a best-effort job loads a module that carries PTX, the module registry
asks `prepare(ptx)` for ONE module text holding the original kernels plus their
`__tally_slice` / `__tally_ptb` entries (ptx_passes.variants, answered from its
on-disk cache after the first time) and loads that text instead of the job's
image. Originals and variants then share the module's `__device__` and
`__constant__` variables, so a kernel reads the same globals whichever form
runs. When the job resolves a kernel, the registry hands its variants to
`register`, and the executor asks `sliced()`/`ptb()` for them.

All of this happens on the job's own session thread while it waits for its
module or function anyway; the executor, which asks under its lock, never
waits for a transformation, and an answer never changes once given.
"""
from __future__ import annotations

import logging
import threading

from ptx_passes import PtxParseError
from ptx_passes.cache import tool_version
from ptx_passes.variants import VariantsResult, build_variants
from tally.backends.base import Function
from tally.scheduler.variants import PTBVariant, SlicedVariant

log = logging.getLogger("tally.server")


class PtxVariantProvider:
    def __init__(self):
        self._lock = threading.Lock()
        # The transform cache's key names the toolkit's version, a digest of its sources
        # (~100-500 ms once per process): computed now, in the background, rather than in
        # the first best-effort module load (a job's, or a migrating job's on its target).
        threading.Thread(target=tool_version, daemon=True, name="tally-ptx-cache-version").start()
        # id(function) -> (function, sliced, ptb); the function is kept so its id is not reused
        self._answers: dict[int, tuple[Function, SlicedVariant | None, PTBVariant | None]] = {}

    @staticmethod
    def prepare(ptx: str) -> VariantsResult | None:
        """The module text to load for a best-effort job, or None when no kernel of
        it can be transformed (load the job's own image then)."""
        try:
            result = build_variants(ptx, "<job module>")
        except PtxParseError as e:
            # The job's kernels still run, whole; only their transformed versions are missing.
            log.warning("cannot build sliced/PTB variants of a module: %s", e)
            return None
        except Exception:  # a bug in a pass must cost the job its variants, not its module
            log.exception("building sliced/PTB variants failed; the module's kernels run untransformed")
            return None
        for name, plans in result.kernels.items():
            for pass_name, reasons in plans.reasons.items():
                log.info("kernel %s has no %s variant: %s", name, pass_name, "; ".join(reasons))
        if all(p.sliced is None and p.ptb is None for p in result.kernels.values()):
            return None
        return result

    def register(self, function: Function, sliced: SlicedVariant | None, ptb: PTBVariant | None) -> None:
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


class PtxVariants:
    """For backends whose sliced and PTB kernels come from the jobs' PTX."""

    def variant_provider(self) -> PtxVariantProvider:
        return PtxVariantProvider()
