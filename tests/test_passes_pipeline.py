"""The pipeline's and the variants builder's contracts: which entries a module
gets and where, the input left alone, bad input, the validity check, and the
command line's `transform`."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ptx_corpus import CORPUS_DIR, compile_ptx

from ptx_passes import PtxParseError, parse_module, print_module
from ptx_passes.ir import Function, LabelRef, instr
from ptx_passes.launch_plan import PTBKernel, SlicedKernel
from ptx_passes.params import param_bytes
from ptx_passes.passes import PassRefused
from ptx_passes.pipeline import PASS_NAMES, VariantBuild, check_prints_back, transform_module
from ptx_passes.variants import KernelVariants, build_variants


@pytest.fixture(scope="module")
def early_return_ptx() -> str:
    return compile_ptx(CORPUS_DIR / "early_return.cu", "sm_80")


def _names(module) -> list[str]:
    return [f.name for f in module.functions()]


def test_variants_follow_their_original_in_pass_order(early_return_ptx):
    result = transform_module(parse_module(early_return_ptx), ["ptb", "slicing"])
    assert _names(result.module) == [
        "early_exit_neighbors", "early_exit_neighbors__tally_ptb", "early_exit_neighbors__tally_slice",
        "return_after_barrier", "return_after_barrier__tally_ptb", "return_after_barrier__tally_slice"]
    report = result.kernels["early_exit_neighbors"]
    assert report.variants == {"ptb": "early_exit_neighbors__tally_ptb",
                               "slicing": "early_exit_neighbors__tally_slice"}
    assert report.sliced == SlicedKernel("early_exit_neighbors__tally_slice", "early_exit_neighbors", 20)
    assert report.ptb == PTBKernel("early_exit_neighbors__tally_ptb", "early_exit_neighbors", 20)
    assert report.refusals == {}


def test_input_module_is_not_modified(early_return_ptx):
    module = parse_module(early_return_ptx)
    before = print_module(module)
    transform_module(module, PASS_NAMES)
    assert print_module(module) == before


def test_unknown_pass_is_a_clear_error(early_return_ptx):
    with pytest.raises(ValueError, match=r"unknown pass 'slice'; choose from slicing, unified-sync, ptb, ptb-raw"):
        transform_module(parse_module(early_return_ptx), ["slice"])


def test_transforming_a_transformed_module_adds_nothing(early_return_ptx):
    once = transform_module(parse_module(early_return_ptx), ["slicing"])
    twice = transform_module(parse_module(print_module(once.module)), ["slicing"])
    assert _names(twice.module) == _names(once.module)
    assert twice.kernels["early_exit_neighbors"].refusals["slicing"] == (
        "the module already has a function named early_exit_neighbors__tally_slice "
        "(was it transformed before?)",)
    assert twice.kernels["early_exit_neighbors__tally_slice"].refusals["slicing"] == (
        "early_exit_neighbors__tally_slice is itself a variant made by these passes",)


def test_validity_check_refuses_a_variant_that_does_not_print_back(early_return_ptx):
    module = parse_module(early_return_ptx)
    kernel = module.entries()[0]
    build = VariantBuild("unified-sync", module, {}, kernel, None, kernel.clone())
    check_prints_back(build)
    # A branch to a label that does not exist prints as a branch to a symbol.
    build.kernel.body.statements.insert(-1, instr("bra", LabelRef("$nowhere")))
    with pytest.raises(PassRefused, match="internal error: the unified-sync variant does not print back"):
        check_prints_back(build)


def test_kernel_without_a_parameter_layout_is_refused_not_crashed():
    ptx = """
.version 9.0
.target sm_80
.address_size 64
.visible .entry k(.param .u32 k_param_0[])
{
    ret;
}
"""
    report = transform_module(parse_module(ptx), ["slicing"]).kernels["k"]
    assert report.variants == {} and "parameter layout unknown" in report.refusals["slicing"][0]


def test_build_variants_returns_one_module_with_every_variant(early_return_ptx, tmp_path):
    result = build_variants(early_return_ptx, cache_dir=tmp_path)
    module = parse_module(result.ptx)
    assert _names(module) == [
        "early_exit_neighbors", "early_exit_neighbors__tally_slice", "early_exit_neighbors__tally_ptb",
        "return_after_barrier", "return_after_barrier__tally_slice", "return_after_barrier__tally_ptb"]
    sliced, ptb, reasons = result.kernels["return_after_barrier"]
    original = module.function("return_after_barrier")
    assert sliced == SlicedKernel("return_after_barrier__tally_slice", "return_after_barrier",
                                  param_bytes(original))
    assert ptb == PTBKernel("return_after_barrier__tally_ptb", "return_after_barrier", param_bytes(original))
    assert reasons == {}
    assert isinstance(result.kernels["early_exit_neighbors"], KernelVariants)


def test_build_variants_reports_refusals(tmp_path):
    from passes_support import pass_kernel_ptx
    result = build_variants(pass_kernel_ptx("grid_sync"), cache_dir=tmp_path)
    sliced, ptb, reasons = result.kernels["grid_sum"]
    assert sliced is None and ptb is None
    assert set(reasons) == {"slicing", "ptb"}
    assert all("grid-wide synchronization" in r for r in reasons["ptb"])
    assert _names(parse_module(result.ptx)) == ["grid_sum"]


def test_build_variants_rejects_bad_input_clearly(tmp_path):
    with pytest.raises(PtxParseError, match=r"job\.ptx:1:1: expected the \.version directive"):
        build_variants("not ptx", "job.ptx", cache_dir=tmp_path)
    with pytest.raises(TypeError, match="takes PTX text"):
        build_variants(b".version 9.0", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("passes,expected", [
    (["ptb"], ["__tally_ptb"]),
    (["slicing", "unified-sync"], ["__tally_slice", "__tally_usync"]),
])
def test_command_line_transform(early_return_ptx, tmp_path, passes, expected):
    source = tmp_path / "in.ptx"
    source.write_text(early_return_ptx)
    out = tmp_path / "out.ptx"
    args = [a for p in passes for a in ("--pass", p)]
    done = subprocess.run([sys.executable, "-m", "ptx_passes", "transform", *args, str(source),
                           "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    names = _names(parse_module(out.read_text()))
    assert names == [n for k in ("early_exit_neighbors", "return_after_barrier")
                     for n in [k] + [k + suffix for suffix in expected]]


def test_variant_functions_are_new_objects(early_return_ptx):
    module = parse_module(early_return_ptx)
    result = transform_module(module, ["slicing"])
    originals = {id(f) for f in module.functions()}
    for f in result.module.functions():
        assert isinstance(f, Function)
        assert (id(f) in originals) == (not f.name.endswith("__tally_slice"))
