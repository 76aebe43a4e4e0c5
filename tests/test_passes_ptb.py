"""PTB: the worker loop (preempt flag read, then one atomic task fetch, broadcast
through a shared slot, one task barrier, one real return), the launch plan's
parameters, the original block index rebuilt from the task number, and the
difference between the raw and the unified form."""
from __future__ import annotations

import pytest

from passes_support import Evaluator, instructions, pass_kernel_ptx, unravel
from ptx_corpus import CORPUS_DIR, CORPUS_FILES, compile_ptx

from ptx_passes import parse_module
from ptx_passes.ir import Instruction, Label, Register, SpecialReg, VarDecl
from ptx_passes.launch_plan import PTB_EXTRA, PTBKernel, extra_params_offset
from ptx_passes.params import param_bytes, param_layout
from ptx_passes.passes.barriers import cta_barrier
from ptx_passes.passes.special_regs import CTAID, NCTAID
from ptx_passes.pipeline import transform_module

FORMS = ("ptb", "ptb-raw")


def _transform(ptx: str):
    original = parse_module(ptx)
    result = transform_module(parse_module(ptx), FORMS)
    out = {}
    for kernel in original.entries():
        report = result.kernels[kernel.name]
        if report.refusals:
            continue
        out[kernel.name] = (kernel, {f: result.module.function(report.variants[f]) for f in FORMS}, report)
    return out


@pytest.fixture(scope="module")
def kernels():
    out = {}
    for source in CORPUS_FILES:
        out.update(_transform(compile_ptx(source, "sm_80")))
    for key in ("sync_reductions", "warp_sync"):
        out.update(_transform(pass_kernel_ptx(key)))
    return out


def _variants(kernels):
    for name, (original, variants, report) in kernels.items():
        for form, variant in variants.items():
            yield name, form, original, variant, report


def test_extra_parameters_follow_the_launch_plan(kernels):
    for name, form, original, variant, report in _variants(kernels):
        n = len(original.params)
        assert variant.params[:n] == original.params
        assert [p.type for p in variant.params[n:]] == ["u64", "u64", "u32", "u32", "u32"]
        start = extra_params_offset(param_bytes(original))
        assert [s.offset for s in param_layout(variant)[n:]] == [start, start + 8, start + 16,
                                                                  start + 20, start + 24]
        assert PTB_EXTRA.size == 28
        assert report.launches[form] == PTBKernel(variant.name, name, param_bytes(original))
    assert kernels["vector_add"][2].ptb.name == "vector_add__tally_ptb"


def _loaded_from(variant, param_index: int) -> Register:
    """The register the kernel loads its extra parameter `param_index` into."""
    name = variant.params[param_index].name
    load = next(i for i in instructions(variant) if i.full_opcode.startswith("ld.param")
                and i.operands[1].base.name == name)
    return load.operands[0]


def test_worker_loop_reads_the_flag_then_takes_one_task(kernels):
    for name, form, original, variant, _report in _variants(kernels):
        n = len(original.params)
        counter, flag = _loaded_from(variant, n), _loaded_from(variant, n + 1)
        code = instructions(variant)
        fetches = [i for i in code if i.opcode == "atom" and i.operands[1].base == counter]
        flag_reads = [i for i in code if i.full_opcode == "ld.volatile.global.u32"]
        assert [i.full_opcode for i in fetches] == ["atom.global.add.u32"]
        assert len(flag_reads) == 1 and flag_reads[0].operands[1].base == flag
        assert code.index(flag_reads[0]) < code.index(fetches[0])
        assert fetches[0].guard.negated and fetches[0].operands[2].value == 1
        task_barriers = [i for i in code if i.full_opcode == "barrier.sync"
                         and i.operands[0].value == 15]
        assert len(task_barriers) == 1 and task_barriers[0].guard is None


def test_only_the_all_tasks_taken_test_really_returns(kernels):
    for name, form, original, variant, _report in _variants(kernels):
        code = instructions(variant)
        returns = [i for i in code if i.opcode in ("ret", "exit")]
        assert len(returns) == 1, f"{variant.name}: {[str(r) for r in returns]}"
        done = code[code.index(returns[0]) - 1]
        assert done.full_opcode == "setp.ge.u32" and returns[0].guard.register == done.operands[0]
        loop = next(s.name for s in variant.body.statements
                    if isinstance(s, Label) and s.name.startswith("$__tally_next_task"))
        back_edges = [i for i in code if i.opcode == "bra" and i.operands[0].name == loop]
        assert len(back_edges) == (1 if form == "ptb" and _has_barrier(original) else
                                   sum(i.opcode in ("ret", "exit") for i in instructions(original)))


def _has_barrier(fn) -> bool:
    return any(cta_barrier(i) is not None for i in instructions(fn))


def test_no_hardware_block_index_is_read(kernels):
    for name, form, original, variant, _report in _variants(kernels):
        assert not any(r in i.operands for i in instructions(variant) for r in CTAID + NCTAID)


def test_task_slot_is_two_aligned_words_of_shared_memory(kernels):
    for name, form, original, variant, _report in _variants(kernels):
        slots = [s for s in variant.body.statements
                 if isinstance(s, VarDecl) and s.name.startswith("__tally_task_slot")]
        assert slots == [VarDecl("shared", "b8", "__tally_task_slot", align=8, array_dims=(8,))]


def test_dynamic_shared_memory_declaration_is_kept(kernels):
    original, variants, _report = kernels["reverse_block"]
    module = parse_module(compile_ptx(CORPUS_DIR / "dynamic_shared.cu", "sm_80"))
    externs = [g for g in module.globals() if "extern" in g.linkage and g.space == "shared"]
    assert externs, "the corpus kernel should use extern shared memory"
    for variant in variants.values():
        assert any(externs[0].name in str(i) for i in instructions(variant))


def test_raw_form_keeps_the_original_barrier_and_unified_form_replaces_it(kernels):
    original, variants, _report = kernels["early_exit_neighbors"]
    barrier_ops = lambda fn: [(i.full_opcode, cta_barrier(i).barrier_id.value)
                              for i in instructions(fn) if cta_barrier(i) is not None]
    assert barrier_ops(variants["ptb-raw"]) == [("barrier.sync", 15), ("bar.sync", 0)]
    assert barrier_ops(variants["ptb"]) == [("barrier.sync", 15), ("barrier.red.and.pred", 0)]


def test_prologue_and_rebuild_give_every_task_its_original_block():
    kernels = _transform(compile_ptx(CORPUS_DIR / "grid_3d.cu", "sm_80"))
    original, variants, _report = kernels["block_ids_3d"]
    variant = variants["ptb-raw"]
    code = instructions(variant)
    body = code[len(code) - len(instructions(original)):]
    mapping = {}
    for o, v in zip(instructions(original), body):
        for a, b in zip(o.operands, v.operands):
            if a != b:
                assert isinstance(a, SpecialReg), f"{o} became {v}"
                mapping[a] = b
    assert set(mapping) == set(CTAID + NCTAID)
    loop_head = variant.body.statements.index(
        next(s for s in variant.body.statements if isinstance(s, Label)))
    prologue = [s for s in variant.body.statements[:loop_head] if isinstance(s, Instruction)]
    returns = next(i for i in code if i.opcode == "ret")
    rebuild = code[code.index(returns) + 1:len(code) - len(body)]
    task = code[code.index(returns) - 1].operands[1]      # setp.ge.u32 %done, %task, %total
    n = len(original.params)
    for grid in [(5, 1, 1), (3, 2, 1), (2, 3, 4)]:
        params = dict(zip((p.name for p in variant.params[n:]), (4096, 4100, *grid)))
        for tid in [(0, 0, 0), (1, 0, 0), (0, 0, 1)]:
            ev = Evaluator(params, {SpecialReg("%tid", a): t for a, t in zip("xyz", tid)},
                           {"__tally_task_slot": 64})
            ev.run(prologue)
            total = grid[0] * grid[1] * grid[2]
            totals = [v for k, v in ev.registers.items() if k.startswith("%tally_total_tasks")]
            leaders = [v for k, v in ev.registers.items() if k.startswith("%tally_leader")]
            assert totals == [total] and leaders == [int(tid == (0, 0, 0))]
            for t in range(total):
                ev.registers[task.name] = t
                ev.run(rebuild)
                assert tuple(ev.registers[mapping[c].name] for c in CTAID) == unravel(t, grid)
                assert tuple(ev.registers[mapping[c].name] for c in NCTAID) == grid
