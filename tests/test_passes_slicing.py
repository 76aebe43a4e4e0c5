"""Slicing: the sliced kernel is the original plus a prologue that rebuilds the
original block index, with every %ctaid/%nctaid read replaced by it; the
prologue, run on concrete launch values, gives the original coordinates for
1-D, 2-D and 3-D grids and any slicing of them."""
from __future__ import annotations

import pytest

from passes_support import Evaluator, instructions, unravel
from ptx_corpus import CORPUS_DIR, CORPUS_FILES, compile_ptx

from ptx_passes import parse_module
from ptx_passes.ir import Register, SpecialReg
from ptx_passes.launch_plan import SLICE_EXTRA, SlicedKernel, extra_params_offset
from ptx_passes.params import param_bytes, param_layout
from ptx_passes.passes.special_regs import CTAID, NCTAID
from ptx_passes.pipeline import transform_module

HW_CTAID_X = SpecialReg("%ctaid", "x")


def _sliced(ptx: str):
    original = parse_module(ptx)
    result = transform_module(parse_module(ptx), ["slicing"])
    return original, result


def substitutions(original, variant):
    """(prologue, {special register: register standing for it}) of a sliced kernel, asserting
    that the rest of its code is the original's, instruction for instruction, except for
    those substitutions."""
    before, after = instructions(original), instructions(variant)
    prologue, body = after[:len(after) - len(before)], after[len(after) - len(before):]
    mapping = {}
    for o, v in zip(before, body):
        if o == v:
            continue
        assert (o.opcode, o.modifiers, o.guard, len(o.operands)) == \
               (v.opcode, v.modifiers, v.guard, len(v.operands)), f"{o} became {v}"
        for a, b in zip(o.operands, v.operands):
            if a != b:
                assert isinstance(a, SpecialReg) and isinstance(b, Register), f"{o} became {v}"
                assert mapping.setdefault(a, b) == b, f"{a} stands for two registers"
    return prologue, mapping


@pytest.fixture(scope="module")
def corpus():
    out = []
    for source in CORPUS_FILES:
        original, result = _sliced(compile_ptx(source, "sm_80"))
        for kernel in original.entries():
            report = result.kernels[kernel.name]
            out.append((kernel, result.module.function(report.variants["slicing"]),
                        report.sliced, result.module.function(kernel.name)))
    return out


def test_original_kernels_stay_in_the_module_unchanged(corpus):
    for original, _variant, _launch, kept in corpus:
        assert kept == original


def test_only_the_prologue_reads_the_hardware_block_index(corpus):
    for original, variant, _launch, _kept in corpus:
        reads_any = any(reg in ins.operands for ins in instructions(original) for reg in CTAID + NCTAID)
        prologue, mapping = substitutions(original, variant)
        hardware_reads = [ins for ins in instructions(variant)
                          if any(r in ins.operands for r in CTAID + NCTAID)]
        if reads_any:
            assert len(hardware_reads) == 1 and hardware_reads[0] in prologue
            assert hardware_reads[0].full_opcode == "mov.u32"
            assert hardware_reads[0].operands[1] == HW_CTAID_X
        else:
            assert hardware_reads == [] and prologue == []
        originally_read = {r for ins in instructions(original) for r in CTAID + NCTAID if r in ins.operands}
        assert set(mapping) == originally_read, original.name


def test_extra_parameters_follow_the_launch_plan(corpus):
    for original, variant, launch, _kept in corpus:
        n = len(original.params)
        assert variant.params[:n] == original.params
        assert [p.type for p in variant.params[n:]] == ["u32"] * 4
        assert variant.params[n].align == 8
        start = extra_params_offset(param_bytes(original))
        assert [s.offset for s in param_layout(variant)[n:]] == [start, start + 4, start + 8, start + 12]
        assert param_layout(variant)[:n] == param_layout(original)
        assert launch == SlicedKernel(f"{original.name}__tally_slice", original.name, param_bytes(original))
        assert SLICE_EXTRA.size == 16


def _run_prologue(variant, prologue, grid, block_offset, hw_x):
    n = len(variant.params) - 4
    extra_names = [p.name for p in variant.params[n:]]
    params = dict(zip(extra_names, (block_offset, *grid)))
    evaluator = Evaluator(params, {HW_CTAID_X: hw_x})
    evaluator.run(prologue)
    return evaluator


GRIDS = [(7, 1, 1), (3, 4, 1), (2, 3, 4), (1, 1, 5), (4, 1, 3)]


@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: "x".join(map(str, g)))
def test_rebuilt_block_index_is_the_original_for_every_slicing(grid):
    original_module, result = _sliced(compile_ptx(CORPUS_DIR / "grid_3d.cu", "sm_80"))
    original = original_module.function("block_ids_3d")
    report = result.kernels["block_ids_3d"]
    variant = result.module.function(report.variants["slicing"])
    prologue, mapping = substitutions(original, variant)
    assert set(mapping) == set(CTAID + NCTAID)      # this kernel reads all six
    total = grid[0] * grid[1] * grid[2]
    for n_slices in sorted({1, 2, 3, total}):
        seen = []
        for piece in report.sliced.slices(grid, n_slices):
            for hw_x in range(piece.count):
                ev = _run_prologue(variant, prologue, grid, piece.block_offset, hw_x)
                linear = piece.block_offset + hw_x
                assert tuple(ev.registers[mapping[c].name] for c in CTAID) == unravel(linear, grid)
                assert tuple(ev.registers[mapping[c].name] for c in NCTAID) == grid
                seen.append(linear)
        assert seen == list(range(total)), f"{n_slices} slices do not cover the grid once"


def test_one_dimensional_reader_computes_only_x():
    original_module, result = _sliced(compile_ptx(CORPUS_DIR / "vector_add.cu", "sm_80"))
    kernel = original_module.entries()[0]
    variant = result.module.function(result.kernels[kernel.name].variants["slicing"])
    prologue, mapping = substitutions(kernel, variant)
    assert set(mapping) == {HW_CTAID_X}
    assert [i.full_opcode for i in prologue if i.opcode in ("rem", "div")] == ["rem.u32"]
    ev = _run_prologue(variant, prologue, (10, 1, 1), 6, 3)
    assert ev.registers[mapping[HW_CTAID_X].name] == 9


def test_kernel_without_block_index_reads_only_gains_the_parameters():
    ptx = """
.version 9.0
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 fill_param_0, .param .u32 fill_param_1)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [fill_param_0];
    mov.u32 %r1, %tid.x;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""
    original, result = _sliced(ptx)
    variant = result.module.function("fill__tally_slice")
    assert variant.body == original.entries()[0].body
    # 12 bytes of original parameters: the extras start at 16, not 12.
    assert [s.offset for s in param_layout(variant)] == [0, 8, 16, 20, 24, 28]
