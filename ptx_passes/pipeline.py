"""The transformation pipeline: which steps make each kernel variant, in order.

    result = transform_module(module, ["slicing", "ptb"])
    result.module                     # originals + <k>__tally_slice + <k>__tally_ptb entries
    result.kernels["k"].sliced        # launch_plan.SlicedKernel, or None if refused
    result.kernels["k"].refusals      # {"ptb": ("grid-wide synchronization: ...",)}

Every variant is a new `.entry` next to its original (the original stays, so
the host can always fall back to it). A step is a short function of one
`VariantBuild`; a step that finds the kernel unsafe raises PassRefused, the
variant is dropped and the reasons recorded. Each variant's extra parameters
must sit where ptx_passes.launch_plan puts them (a step); after all variants,
the module checks run: the new entries, printed, must parse back to themselves.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .ir import Function, Module
from .launch_plan import PTB_EXTRA, SLICE_EXTRA, PTBKernel, SlicedKernel, extra_params_offset
from .params import param_bytes, param_layout
from .parser import parse_module
from .passes import PassRefused, ptb, safety, slicing, unified_sync
from .passes.kernel_code import functions_by_name
from .printer import print_module

PASS_VERSIONS = {
    "safety": safety.VERSION,
    "slicing": slicing.VERSION,
    "unified-sync": unified_sync.VERSION,
    "ptb": ptb.VERSION,
}
VARIANT_SUFFIXES = {
    "slicing": "__tally_slice",
    "unified-sync": "__tally_usync",
    "ptb": "__tally_ptb",
    "ptb-raw": "__tally_ptb_raw",
}
PASS_NAMES = tuple(VARIANT_SUFFIXES)
# The passes each variant applies (what a cached result depends on).
PASSES_APPLIED = {
    "slicing": ("safety", "slicing"),
    "unified-sync": ("safety", "unified-sync"),
    "ptb": ("safety", "unified-sync", "ptb"),
    "ptb-raw": ("safety", "ptb"),
}


def applied_passes(pass_names) -> dict[str, int]:
    """name -> VERSION of every pass that making `pass_names`' variants runs, plus one
    entry per requested variant (the set of variants changes the output too)."""
    out = {f"variant:{p}": 1 for p in pass_names}
    for p in pass_names:
        out.update({name: PASS_VERSIONS[name] for name in PASSES_APPLIED[p]})
    return out


@dataclass
class VariantBuild:
    """One variant of one kernel while its steps run."""

    pass_name: str
    module: Module
    functions: dict[str, Function]
    original: Function
    facts: safety.KernelFacts
    kernel: Function | None = None
    launch: SlicedKernel | PTBKernel | None = None


# ---------------------------------------------------------------------------- steps


def refuse_unsafe(build: VariantBuild) -> None:
    reasons = safety.refusal_reasons(build.facts, build.pass_name)
    if reasons:
        raise PassRefused(reasons)


def clone_as_variant(build: VariantBuild) -> None:
    if any(build.original.name.endswith(suffix) for suffix in VARIANT_SUFFIXES.values()):
        raise PassRefused(f"{build.original.name} is itself a variant made by these passes")
    name = build.original.name + VARIANT_SUFFIXES[build.pass_name]
    if name in build.functions:
        raise PassRefused(f"the module already has a function named {name} "
                          "(was it transformed before?)")
    build.kernel = build.original.clone()
    build.kernel.name = name


def _original_param_bytes(build: VariantBuild) -> int:
    try:
        return param_bytes(build.original)
    except ValueError as exc:
        raise PassRefused(f"parameter layout unknown: {exc}") from None


def slice_block_index(build: VariantBuild) -> None:
    slicing.slice_kernel(build.kernel, build.module)
    build.launch = SlicedKernel(build.kernel.name, build.original.name, _original_param_bytes(build))


def unify_synchronization(build: VariantBuild) -> None:
    unified_sync.unify_synchronization(build.kernel, build.module)


def persistent_thread_blocks(build: VariantBuild) -> None:
    ptb.make_persistent(build.kernel, build.module)
    build.launch = PTBKernel(build.kernel.name, build.original.name, _original_param_bytes(build))


def check_extra_params(build: VariantBuild) -> None:
    """The variant's extra parameters are packed exactly as the launch plan packs them."""
    extra = SLICE_EXTRA if isinstance(build.launch, SlicedKernel) else PTB_EXTRA
    original = len(build.original.params)
    slots = param_layout(build.kernel)[original:]
    start = extra_params_offset(build.launch.original_param_bytes)
    end = slots[-1].offset + slots[-1].size
    if slots[0].offset != start or end - start != extra.size:
        raise AssertionError(f"{build.kernel.name}: extra parameters at {slots[0].offset}..{end}, "
                             f"launch plan packs {start}..{start + extra.size}")


VARIANT_STEPS: dict[str, list[Callable[[VariantBuild], None]]] = {
    "slicing": [refuse_unsafe, clone_as_variant, slice_block_index, check_extra_params],
    "unified-sync": [refuse_unsafe, clone_as_variant, unify_synchronization],
    "ptb": [refuse_unsafe, clone_as_variant, unify_synchronization, persistent_thread_blocks,
            check_extra_params],
    "ptb-raw": [refuse_unsafe, clone_as_variant, persistent_thread_blocks, check_extra_params],
}


def check_reparses(module: Module, variants: list[Function]) -> None:
    """Validity: the new entries print as PTX that parses back to the same functions.
    (The other items came from the parser unchanged; re-reading them proves nothing.)"""
    alone = Module(module.version, module.targets, module.address_size, list(variants))
    if parse_module(print_module(alone), "<transformed kernels>").items != alone.items:
        raise AssertionError("the transformed kernels do not parse back to themselves")


MODULE_CHECKS: list[Callable[[Module, list[Function]], None]] = [check_reparses]


# ---------------------------------------------------------------------------- results


@dataclass
class KernelReport:
    name: str
    variants: dict[str, str] = field(default_factory=dict)     # pass name -> variant entry name
    launches: dict[str, SlicedKernel | PTBKernel] = field(default_factory=dict)
    refusals: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def sliced(self) -> SlicedKernel | None:
        return self.launches.get("slicing")

    @property
    def ptb(self) -> PTBKernel | None:
        return self.launches.get("ptb")


@dataclass
class TransformResult:
    module: Module
    kernels: dict[str, KernelReport]


def transform_module(module: Module, pass_names: list[str] | tuple[str, ...],
                     checks: bool = True) -> TransformResult:
    """A new module holding every original item plus, after each kernel, its variant for
    each pass in `pass_names` (any of PASS_NAMES; "ptb" includes unified sync). The input
    module is not modified. `checks=False` skips MODULE_CHECKS (benchmarks of the passes)."""
    unknown = [p for p in pass_names if p not in VARIANT_STEPS]
    if unknown:
        raise ValueError(f"unknown pass {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(PASS_NAMES)}")
    functions = functions_by_name(module)
    kernels: dict[str, KernelReport] = {}
    items, variants = [], []
    for item in module.items:
        items.append(item)
        if not (isinstance(item, Function) and item.is_entry and item.body is not None):
            continue
        report = kernels[item.name] = KernelReport(item.name)
        facts = safety.kernel_facts(module, item, functions)
        for pass_name in dict.fromkeys(pass_names):
            build = VariantBuild(pass_name, module, functions, item, facts)
            try:
                for step in VARIANT_STEPS[pass_name]:
                    step(build)
            except PassRefused as refused:
                report.refusals[pass_name] = refused.reasons
                continue
            items.append(build.kernel)
            variants.append(build.kernel)
            report.variants[pass_name] = build.kernel.name
            if build.launch is not None:
                report.launches[pass_name] = build.launch
    result = Module(module.version, module.targets, module.address_size, items)
    if checks:
        for check in MODULE_CHECKS:
            check(result, variants)
    return TransformResult(result, kernels)
