"""Unified synchronization: one barrier point (one barrier instruction, two for
__syncthreads_count/_and/_or), one real return, every barrier site resuming
right after itself, every return routed to the barrier point, and nothing
else in the kernel changed."""
from __future__ import annotations

import pytest

from passes_support import instructions, pass_kernel_ptx
from ptx_corpus import CORPUS_FILES, compile_ptx

from ptx_passes import parse_module
from ptx_passes.ir import Instruction, Label, LabelRef, Register
from ptx_passes.passes.barriers import cta_barrier
from ptx_passes.passes.unified_sync import unify_synchronization
from ptx_passes.pipeline import transform_module


def _pairs(ptx: str):
    original = parse_module(ptx)
    result = transform_module(parse_module(ptx), ["unified-sync"])
    return [(k, result.module.function(result.kernels[k.name].variants["unified-sync"]))
            for k in original.entries() if "unified-sync" in result.kernels[k.name].variants]


@pytest.fixture(scope="module")
def kernels():
    out = []
    for source in CORPUS_FILES:
        out += _pairs(compile_ptx(source, "sm_80"))
    for key in ("sync_reductions", "warp_sync"):
        out += _pairs(pass_kernel_ptx(key))
    return {k.name: (k, v) for k, v in out}


def _barriers(fn):
    return [ins for ins in instructions(fn) if cta_barrier(ins) is not None]


def _mentions_tally(ins: Instruction) -> bool:
    text = str(ins)
    return "%tally_" in text or "$__tally_" in text


def test_the_corpus_has_kernels_with_and_without_barriers(kernels):
    with_barriers = [n for n, (k, _v) in kernels.items() if _barriers(k)]
    assert len(with_barriers) >= 6 and len(kernels) - len(with_barriers) >= 10


def test_kernels_without_barriers_are_unchanged(kernels):
    for original, variant in kernels.values():
        if not _barriers(original):
            assert variant.body == original.body and variant.params == original.params


def test_one_barrier_point_and_one_return(kernels):
    for name, (original, variant) in kernels.items():
        if not _barriers(original):
            continue
        barriers = _barriers(variant)
        reduces = any(cta_barrier(b).action == "red" for b in _barriers(original))
        expected = ["barrier.red.and.pred"] + (["barrier.red.popc.u32"] if reduces else [])
        assert [b.full_opcode for b in barriers] == expected, name
        assert all(b.guard is None and b.operands[1].value == 0 for b in barriers)
        rets = [i for i in instructions(variant) if i.opcode in ("ret", "exit")]
        all_returning = barriers[0].operands[0]
        assert len(rets) == 1 and rets[0].guard.register == all_returning and not rets[0].guard.negated
        body = variant.body.statements
        assert body.index(rets[0]) == body.index(barriers[0]) + 1, name


def test_everything_else_is_the_original_code_in_order(kernels):
    for name, (original, variant) in kernels.items():
        if not _barriers(original) or name in ("block_votes", "barrier_in_asm_scope"):
            continue   # (those two have nested scopes, flattened with renamed registers)
        kept = [i for i in instructions(original) if cta_barrier(i) is None and i.opcode != "ret"]
        assert [i for i in instructions(variant) if not _mentions_tally(i)] == kept, name


def test_returns_branch_to_the_return_path_with_their_guards(kernels):
    for name, (original, variant) in kernels.items():
        if not _barriers(original):
            continue
        returns = [i for i in instructions(original) if i.opcode in ("ret", "exit")]
        return_label = next(s.name for s in variant.body.statements
                            if isinstance(s, Label) and s.name.startswith("$__tally_return"))
        branches = [i for i in instructions(variant)
                    if i.opcode == "bra" and i.operands == (LabelRef(return_label),)]
        assert sorted(map(str, (b.guard for b in branches))) == sorted(map(str, (r.guard for r in returns)))


def _sites_and_dispatch(variant):
    """({site number: label after the site}, {site number: label the dispatch sends it to})."""
    statements = variant.body.statements
    sync = next(s.name for s in statements if isinstance(s, Label) and s.name.startswith("$__tally_sync"))
    sites, site_number = {}, 1
    for i, s in enumerate(statements):
        if isinstance(s, Instruction) and s.opcode == "bra" and s.operands == (LabelRef(sync),) \
                and not (s.guard and s.guard.register.name.startswith("%tally_returning")):
            previous = statements[i - 1]
            if isinstance(previous, Instruction) and previous.full_opcode == "mov.u32" \
                    and previous.operands[0].name.startswith("%tally_barrier_site"):
                site_number = previous.operands[1].value
            sites[site_number] = statements[i + 1].name
    dispatch_code = statements[statements.index(Label(sync)):]
    dispatch, pending = {}, None
    for ins in dispatch_code:
        if not isinstance(ins, Instruction):
            continue
        if ins.full_opcode == "setp.eq.u32":
            pending = ins.operands[2].value
        elif ins.opcode == "bra" and ins.operands[0].name.startswith("$__tally_resume"):
            dispatch[pending if ins.guard else max(sites)] = ins.operands[0].name
    return sites, dispatch


def test_every_barrier_site_resumes_right_after_itself(kernels):
    for name, (original, variant) in kernels.items():
        count = len(_barriers(original))
        if not count:
            continue
        sites, dispatch = _sites_and_dispatch(variant)
        assert sorted(sites) == list(range(1, count + 1)), name
        assert dispatch == sites, name


def test_reductions_vote_and_read_back_the_count(kernels):
    original, variant = kernels["block_votes"]
    code = instructions(variant)
    votes = [i for i in code if i.opcode in ("mov", "not") and i.type == "pred"
             and i.operands[0].name.startswith("%tally_vote")]
    # initial false, popc vote, and-vote (negated), or vote, false for returning threads
    assert [v.opcode for v in votes] == ["mov", "mov", "not", "mov", "mov"]
    count = next(b.operands[0] for b in _barriers(variant) if b.opcode == "barrier" and b.has("popc"))
    readers = [str(i) for i in code if count in i.operands[1:]]
    assert [r.split()[0] for r in readers] == ["mov.u32", "setp.eq.u32", "setp.ne.u32"]
    assert readers[0].startswith("mov.u32 \t%r4, ")        # __syncthreads_count's result register


def test_warp_level_synchronization_is_untouched(kernels):
    original, variant = kernels["shuffle_then_block_sum"]
    assert _barriers(original)
    warp_ops = lambda fn: [i for i in instructions(fn) if i.opcode in ("shfl", "vote", "match")
                           or i.full_opcode == "bar.warp.sync"]
    assert warp_ops(variant) == warp_ops(original) and len(warp_ops(original)) == 5


def test_kernel_whose_warp_operations_a_returning_thread_may_skip_is_not_unified(kernels):
    assert "warp_then_block_sum" not in kernels


def test_scoped_barriers_are_flattened_with_fresh_registers(kernels):
    original, variant = kernels["barrier_in_asm_scope"]
    assert not any(isinstance(s, type(variant.body)) for s in variant.body.statements)
    setp = next(i for i in instructions(variant) if i.full_opcode == "setp.eq.u32"
                and not i.operands[0].name.startswith("%tally_at_site"))
    assert isinstance(setp.operands[0], Register) and setp.operands[0].name.startswith("%tally_p_")


def test_pass_reports_whether_it_changed_the_kernel():
    module = parse_module(compile_ptx(CORPUS_FILES[0].parent / "vector_add.cu", "sm_80"))
    kernel = module.entries()[0].clone()
    assert unify_synchronization(kernel, module) is False
    module = parse_module(compile_ptx(CORPUS_FILES[0].parent / "early_return.cu", "sm_80"))
    kernel = module.entries()[0].clone()
    assert unify_synchronization(kernel, module) is True
