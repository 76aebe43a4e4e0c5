"""The server's entry point to the passes: one PTX module in, one PTX module out
holding the original kernels plus each transformable kernel's sliced and PTB
variants, so the server loads a single module per job module.

    result = build_variants(ptx_text)
    result.ptx                                  # load this one module
    sliced, ptb, reasons = result.kernels["k"]  # SlicedKernel | None, PTBKernel | None,
                                                # {"slicing": (why not, ...), "ptb": (...)}

Results come from the content-addressed cache (ptx_passes.cache) when the same
PTX was transformed before by the same passes and toolkit.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

from .cache import TransformCache, cache_key
from .launch_plan import PTBKernel, SlicedKernel
from .parser import parse_module
from .pipeline import applied_passes, transform_module
from .printer import print_module

VARIANT_PASSES = ("slicing", "ptb")


class KernelVariants(NamedTuple):
    sliced: SlicedKernel | None
    ptb: PTBKernel | None
    reasons: dict[str, tuple[str, ...]]     # pass name -> why that variant does not exist


@dataclass(frozen=True)
class VariantsResult:
    ptx: str
    kernels: dict[str, KernelVariants]
    from_cache: bool = False


def build_variants(ptx_text: str, source_name: str = "<ptx>", *,
                   cache_dir: str | os.PathLike | None = None, use_cache: bool = True) -> VariantsResult:
    """Transform every kernel of `ptx_text` (see the module docstring). Raises
    ptx_passes.PtxParseError for malformed PTX. `cache_dir` overrides the cache's
    directory; `use_cache=False` neither reads nor writes it."""
    if not isinstance(ptx_text, str):
        raise TypeError(f"build_variants takes PTX text (str), not {type(ptx_text).__name__}")
    cache = TransformCache(cache_dir) if use_cache else None
    key = cache_key(ptx_text, applied_passes(VARIANT_PASSES))
    if cache is not None:
        entry = cache.load(key)
        if entry is not None:
            kernels = _kernels_from_json(entry.report)
            if kernels is not None:
                return VariantsResult(entry.ptx, kernels, from_cache=True)
    result = transform_module(parse_module(ptx_text, source_name), VARIANT_PASSES)
    kernels = {name: KernelVariants(report.sliced, report.ptb, dict(report.refusals))
               for name, report in result.kernels.items()}
    ptx = print_module(result.module)
    if cache is not None:
        cache.store(key, ptx, _kernels_to_json(kernels))
    return VariantsResult(ptx, kernels)


def _launch_to_json(launch: SlicedKernel | PTBKernel | None) -> dict | None:
    if launch is None:
        return None
    return {"name": launch.name, "original_name": launch.original_name,
            "original_param_bytes": launch.original_param_bytes}


def _kernels_to_json(kernels: dict[str, KernelVariants]) -> dict:
    return {"kernels": {name: {"sliced": _launch_to_json(v.sliced), "ptb": _launch_to_json(v.ptb),
                               "reasons": {p: list(r) for p, r in v.reasons.items()}}
                        for name, v in kernels.items()}}


def _kernels_from_json(report: dict) -> dict[str, KernelVariants] | None:
    """None if the report does not have the expected shape (treated as a cache miss)."""
    try:
        out = {}
        for name, v in report["kernels"].items():
            sliced = SlicedKernel(**v["sliced"]) if v["sliced"] is not None else None
            ptb = PTBKernel(**v["ptb"]) if v["ptb"] is not None else None
            reasons = {p: tuple(r) for p, r in v["reasons"].items()}
            out[name] = KernelVariants(sliced, ptb, reasons)
        return out
    except (KeyError, TypeError, AttributeError):
        return None
