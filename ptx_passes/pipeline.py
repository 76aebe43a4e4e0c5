"""The transformation pipeline: which steps make each kernel variant, in order.

    result = transform_module(module, ["slicing", "ptb"])
    result.module                     # originals + <k>__tally_slice + <k>__tally_ptb entries
    result.kernels["k"].sliced        # launch_plan.SlicedKernel, or None if refused
    result.kernels["k"].refusals      # {"ptb": ("grid-wide synchronization: ...",)}

Every variant is a new `.entry` next to its original (the original stays, so
the host can always fall back to it). A step is a short function of one
`VariantBuild`; a step that finds the kernel unsafe raises PassRefused, the
variant is dropped and the reasons recorded. The last steps are validity
checks: the variant's extra parameters sit where ptx_passes.launch_plan puts
them, and the variant, printed, parses back to itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .ir import Function, Module
from .launch_plan import PTB_EXTRA, SLICE_EXTRA, PTBKernel, SlicedKernel, extra_params_offset
from .errors import PtxParseError
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
        raise PassRefused(f"internal error: {build.kernel.name} has its extra parameters at "
                          f"{slots[0].offset}..{end}, the launch plan packs them at "
                          f"{start}..{start + extra.size}; please report this with the input PTX")




def check_prints_back(build: VariantBuild) -> None:
    """Validity: the variant prints as PTX that parses back to the same function. A
    failure is a bug in the toolkit; the kernel then runs untransformed, and the
    reason says so."""
    alone = Module(build.module.version, build.module.targets, build.module.address_size, [build.kernel])
    try:
        again = parse_module(print_module(alone), build.kernel.name).items
    except PtxParseError as exc:
        raise PassRefused(f"internal error: the {build.pass_name} variant does not parse back "
                          f"({exc.one_line()}); please report this with the input PTX") from None
    if again != alone.items:
        raise PassRefused(f"internal error: the {build.pass_name} variant does not print back to "
                          "itself; please report this with the input PTX")


VARIANT_STEPS: dict[str, list[Callable[[VariantBuild], None]]] = {
    "slicing": [refuse_unsafe, clone_as_variant, slice_block_index, check_extra_params,
                check_prints_back],
    "unified-sync": [refuse_unsafe, clone_as_variant, unify_synchronization, check_prints_back],
    "ptb": [refuse_unsafe, clone_as_variant, unify_synchronization, persistent_thread_blocks,
            check_extra_params, check_prints_back],
    "ptb-raw": [refuse_unsafe, clone_as_variant, persistent_thread_blocks, check_extra_params,
                check_prints_back],
}
VALIDITY_CHECKS = (check_extra_params, check_prints_back)


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
    module is not modified. `checks=False` skips the VALIDITY_CHECKS steps (to time the
    passes alone)."""
    unknown = [p for p in pass_names if p not in VARIANT_STEPS]
    if unknown:
        raise ValueError(f"unknown pass {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(PASS_NAMES)}")
    functions = functions_by_name(module)
    kernels: dict[str, KernelReport] = {}
    items = []
    for item in module.items:
        items.append(item)
        if not (isinstance(item, Function) and item.is_entry and item.body is not None):
            continue
        report = kernels[item.name] = KernelReport(item.name)
        facts = safety.kernel_facts(module, item, functions)
        for pass_name in dict.fromkeys(pass_names):
            build = VariantBuild(pass_name, module, functions, item, facts)
            steps = [s for s in VARIANT_STEPS[pass_name] if checks or s not in VALIDITY_CHECKS]
            try:
                for step in steps:
                    step(build)
            except PassRefused as refused:
                report.refusals[pass_name] = refused.reasons
                continue
            items.append(build.kernel)
            report.variants[pass_name] = build.kernel.name
            if build.launch is not None:
                report.launches[pass_name] = build.launch
    return TransformResult(Module(module.version, module.targets, module.address_size, items), kernels)
