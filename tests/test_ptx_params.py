"""Parameter layouts from .entry signatures: DESIGN.md's kp example, and agreement with what
ptxas records in the cubin (EIATTR_KPARAM_INFO) for every corpus and Triton kernel."""
from __future__ import annotations

import subprocess

import pytest

from ptx_corpus import CORPUS_DIR, CORPUS_FILES, TRITON_PTX, compile_ptx, cuda_tool
from ptx_passes import ir, parse_module
from ptx_passes.cubin_info import kernel_param_total, kernel_params
from ptx_passes.params import ParamSlot, param_bytes, param_layout, param_size_align


def test_design_kp_example():
    module = parse_module(compile_ptx(CORPUS_DIR / "struct_params.cu", "sm_80"))
    kp = module.function("kp")
    layout = param_layout(kp)
    assert [s.offset for s in layout] == [0, 8, 32, 48, 64, 96, 104]
    assert [s.size for s in layout] == [1, 24, 16, 2, 32, 8, 1]
    assert [s.align for s in layout] == [1, 8, 16, 2, 16, 8, 1]
    assert param_bytes(kp) == 105


def _cubin(ptx: str, arch: str, tmp_path) -> bytes:
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    out = tmp_path / "k.cubin"
    result = subprocess.run([cuda_tool("ptxas"), f"-arch={arch}", str(src), "-o", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return out.read_bytes()


def _check_against_cubin(ptx: str, arch: str, tmp_path) -> int:
    module = parse_module(ptx)
    cubin = _cubin(ptx, arch, tmp_path)
    from_cubin = kernel_params(cubin)
    for entry in module.entries():
        assert [(s.offset, s.size) for s in param_layout(entry)] == from_cubin[entry.name], entry.name
        assert param_bytes(entry) == kernel_param_total(cubin, entry.name), entry.name
    assert sorted(from_cubin) == sorted(e.name for e in module.entries())
    return len(from_cubin)


@pytest.mark.parametrize("source", CORPUS_FILES, ids=lambda p: p.stem)
def test_corpus_layouts_match_the_cubin(source, tmp_path):
    assert _check_against_cubin(compile_ptx(source, "sm_80"), "sm_80", tmp_path) >= 1


@pytest.mark.parametrize("path", [p for p in TRITON_PTX if "sm_80" in p.name], ids=lambda p: p.stem)
def test_triton_layouts_match_the_cubin(path, tmp_path):
    assert _check_against_cubin(path.read_text(), "sm_80", tmp_path) == 1


def test_vector_and_pointer_params():
    assert param_size_align(ir.Param("v", "f32", vector=4)) == (16, 16)
    assert param_size_align(ir.Param("p", "u64", ptr=True, ptr_space="global", ptr_align=16)) == (8, 8)
    assert param_size_align(ir.Param("a", "b32", array_dims=(2, 3))) == (24, 4)
    fn = ir.Function("k", "entry", params=[ir.Param("c", "u8"), ir.Param("v", "f32", vector=2)])
    assert param_layout(fn) == [ParamSlot(0, 1, 1), ParamSlot(8, 8, 8)]
    assert param_bytes(ir.Function("k", "entry")) == 0


@pytest.mark.parametrize("param,words", [
    (ir.Param("a", "b8", array_dims=(None,)), "unsized array"),
    (ir.Param("p", "pred"), "no size"),
    (ir.Param("x", "b32", align=3), "not a power of two"),
])
def test_bad_parameters_are_value_errors(param, words):
    with pytest.raises(ValueError, match=words):
        param_size_align(param)
