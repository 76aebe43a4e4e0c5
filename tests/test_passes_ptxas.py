"""Every kernel of the corpus (nvcc's PTX for sm_80 and sm_90, -G and -lineinfo
variants, Triton's PTX, the hand-written fixtures and the pass-test kernels),
transformed by every pass into one module, is accepted by ptxas; and the
cubin ptxas makes lays the variants' parameters out exactly as
ptx_passes.launch_plan packs them."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest

from passes_support import ALL_PASSES, PASS_KERNELS, PASS_SOURCES, ptxas_archs, run_ptxas_many
from ptx_corpus import (CORPUS_DIR, CORPUS_FILES, DEBUG_FILES, HANDWRITTEN_PTX, TESTS_DIR, TRITON_PTX,
                        compile_many, compile_ptx)

from ptx_passes import parse_module, print_module
from ptx_passes.cubin_info import kernel_params
from ptx_passes.launch_plan import PTB_EXTRA, SLICE_EXTRA, PTBKernel, extra_params_offset
from ptx_passes.params import param_layout
from ptx_passes.pipeline import transform_module


HOPPER_PROGRAMS = TESTS_DIR / "cuda" / "programs"


@dataclass(frozen=True)
class Case:
    name: str
    source: object            # a .cu path (compiled with arch/flags) or a .ptx path
    arch: str = "sm_80"
    flags: tuple[str, ...] = ()
    expect_all_variants: bool = True   # no kernel may be refused
    cutlass: bool = False              # built with the CUTLASS headers (found when first needed)

    def compile_flags(self) -> tuple[str, ...]:
        if not self.cutlass:
            return self.flags
        from cutlass_headers import cutlass_include_dir
        return (*self.flags, "-std=c++17", "--expt-relaxed-constexpr", f"-I{cutlass_include_dir()}")

    def ptx(self) -> str:
        if self.source.suffix == ".ptx":
            return self.source.read_text()
        return compile_ptx(self.source, self.arch, self.compile_flags())


def _cases() -> list[Case]:
    cases = [Case(f"{s.stem}.{arch}", s, arch) for s in CORPUS_FILES for arch in ("sm_80", "sm_90")]
    cases += [Case(f"{name[:-3]}.sm_80-G", CORPUS_DIR / name, "sm_80", ("-G",)) for name in DEBUG_FILES]
    cases += [Case(f"{name}.sm_80-lineinfo", CORPUS_DIR / f"{name}.cu", "sm_80", ("-lineinfo",))
              for name in ("early_return", "matmul_tiled")]
    cases += [Case(f"triton.{p.stem}", p) for p in TRITON_PTX]
    cases += [Case(f"handwritten.{p.stem}", p, expect_all_variants=False) for p in HANDWRITTEN_PTX]
    # Hopper programs (TMA, mbarriers, wgmma, setmaxnreg): their PTX for sm_90a
    cases += [Case(f"hopper.{name}", HOPPER_PROGRAMS / f"{name}.cu", "sm_90a", expect_all_variants=False)
              for name in ("tma_pipeline", "tma_wgmma_gemm", "tma_im2col")]
    cases += [Case(f"hopper.{name}", HOPPER_PROGRAMS / f"{name}.cu", "sm_90a", expect_all_variants=False, cutlass=True)
              for name in ("cutlass_sm90_gemm", "cutlass_sm90_conv")]
    cases += [Case(f"passes.{key}", PASS_SOURCES / source, arch, flags,
                   expect_all_variants=key == "sync_reductions")
              for key, (source, arch, flags) in PASS_KERNELS.items()]
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    """case name -> (TransformResult, [(arch, PtxasRun, cubin path or None)]), all ptxas runs
    of the module done in parallel."""
    compile_many([(c.source, c.arch, c.compile_flags()) for c in CASES if c.source.suffix == ".cu"])
    out_dir = tmp_path_factory.mktemp("passes_ptxas")
    results, jobs, owners = {}, [], []
    for case in CASES:
        result = transform_module(parse_module(case.ptx(), case.name), ALL_PASSES)
        results[case.name] = result
        path = out_dir / f"{case.name}.ptx"
        path.write_text(print_module(result.module))
        # -rdc PTX calls functions defined elsewhere: assemble it as relocatable code.
        extra = ("-c",) if "-rdc=true" in case.flags else ()
        for i, arch in enumerate(ptxas_archs(result.module.targets)):
            cubin = out_dir / f"{case.name}.{arch}.cubin" if i == 0 else None
            jobs.append((path, arch, cubin or "/dev/null", extra))
            owners.append((case.name, arch, cubin))
    runs = run_ptxas_many(jobs)
    by_case = {c.name: [] for c in CASES}
    for (name, arch, cubin), run in zip(owners, runs):
        by_case[name].append((arch, run, cubin))
    return {name: (results[name], by_case[name]) for name in results}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ptxas_accepts_every_variant(case, assembled):
    result, runs = assembled[case.name]
    assert runs, "no ptxas run for this case"
    for arch, run, _cubin in runs:
        assert run.ok, f"{case.name} for {arch}: {run.failure()}"
    variants = sum(len(r.variants) for r in result.kernels.values())
    if case.expect_all_variants:
        refused = {k: r.refusals for k, r in result.kernels.items() if r.refusals}
        assert refused == {}
        assert variants == len(ALL_PASSES) * len(result.kernels) > 0
    for report in result.kernels.values():
        for pass_name in ALL_PASSES:
            assert (pass_name in report.variants) != bool(report.refusals.get(pass_name)), \
                f"{report.name}: {pass_name} must either make a variant or say why not"


@pytest.mark.parametrize("case", [c for c in CASES if c.expect_all_variants], ids=lambda c: c.name)
def test_cubin_parameter_layout_matches_launch_plan(case, assembled):
    result, runs = assembled[case.name]
    _arch, run, cubin = runs[0]
    assert run.ok, run.failure()
    layouts = kernel_params(cubin.read_bytes())
    checked = 0
    for report in result.kernels.values():
        original = [(s.offset, s.size) for s in param_layout(result.module.function(report.name))]
        for pass_name, launch in report.launches.items():
            extra = PTB_EXTRA if isinstance(launch, PTBKernel) else SLICE_EXTRA
            start = extra_params_offset(launch.original_param_bytes)
            field_sizes = [struct.calcsize("<" + c) for c in extra.format.lstrip("<")]
            offsets = [start + sum(field_sizes[:i]) for i in range(len(field_sizes))]
            expected = original + list(zip(offsets, field_sizes))
            assert sorted(layouts[launch.name]) == expected, f"{launch.name} ({pass_name})"
            checked += 1
    assert checked == 3 * len(result.kernels)
