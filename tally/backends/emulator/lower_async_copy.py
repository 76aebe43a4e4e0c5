"""Lowering of the asynchronous copies, every `cp` instruction: Ampere's cp.async
(ops_memory.cpp) and sm_90's bulk copies (csrc/src/emulator/ops_bulk_copy.cpp and,
for tensors, ops_tensor_copy.cpp via lower_tensor_copy.py):

    cp.async.ca/cg.shared.global [dst], [src], size{, src-size | ignore}; commit/wait groups
    cp.async.mbarrier.arrive{.noinc}.shared.b64 [mbar]
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{.multicast::cluster}{.L2::cache_hint}
        [dst], [src], size, [mbar]{, ctaMask}{, policy}
    cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]
    cp.async.bulk.global.shared::cta.bulk_group{.L2::cache_hint} [dst], [src], size{, policy}
    cp.reduce.async.bulk.<dst>.<src>.<completion>.<op>.<type> [dst], [src], size{, [mbar]}
    cp.async.bulk.commit_group, cp.async.bulk.wait_group{.read} N, cp.async.bulk.prefetch...
    cp.async.bulk.tensor.<n>d...: lower_tensor_copy.py

The copies happen when they are issued, so copy groups have nothing to wait for;
cache hints and prefetches change nothing.
"""
from __future__ import annotations

from ptx_passes import ir
from ptx_passes.ir import TYPE_SIZES
from tally._core import emulator as core
from tally.backends.emulator.context import FLAGS, NO_SLOT, FunctionLowering, Lowerers
from tally.backends.emulator.lower_memory import ATOM_TYPE_CODES
from tally.backends.emulator.lower_tensor_copy import REDUCE_OPS, lower_tensor_copy

# This family's instructions by opcode (lowering.py joins the families).
ASYNC_COPY = Lowerers()


def _spaces(ins: ir.Instruction) -> tuple[str, str]:
    """(destination, source) state spaces, in the order the modifiers name them."""
    named = [m for m in ins.modifiers if m in ("global", "shared::cluster", "shared::cta", "shared")]
    if len(named) != 2:
        raise ValueError(ins.full_opcode)
    return named[0], named[1]


def _drop_hints(ins: ir.Instruction, ops: list[ir.Operand]) -> list[ir.Operand]:
    if ins.has("L2::cache_hint"):
        return ops[:-1]   # the cache policy: a hint
    return ops


def lower_bulk(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if ins.has("tensor"):
        lower_tensor_copy(cx, ins)
        return
    if ins.has("commit_group") or ins.has("wait_group") or ins.has("prefetch"):
        cx.emit("nop", [])
        return
    try:
        dst_space, src_space = _spaces(ins)
    except ValueError:
        raise cx.unsupported(ins.full_opcode) from None
    ops = _drop_hints(ins, list(ins.operands))
    if ins.has("reduce"):
        _lower_reduce(cx, ins, ops, dst_space, src_space)
        return
    if len(ops) < 3:
        raise cx.unsupported(f"{ins.full_opcode} with {len(ins.operands)} operands")
    dst = cx.address_slot(ops[0], dst_space)
    src = cx.address_slot(ops[1], src_space)
    size = cx.src(ops[2], "u32")
    if dst_space == "global":
        cx.emit("cp.async.bulk.global.shared", [dst, src, size])
        return
    if len(ops) < 4 or not ins.has("mbarrier::complete_tx::bytes"):
        raise cx.unsupported(f"{ins.full_opcode} (a copy into shared memory completes on an mbarrier)")
    bar = cx.address_slot(ops[3], "shared::cluster")
    mask = NO_SLOT
    if ins.has("multicast::cluster"):
        if len(ops) < 5:
            raise cx.unsupported(f"{ins.full_opcode} without its CTA mask")
        mask = cx.src(ops[4], "u16")
    source = "global" if src_space == "global" else "shared"
    cx.emit(f"cp.async.bulk.shared.{source}", [dst, src, size, bar, mask])


def _lower_reduce(cx: FunctionLowering, ins: ir.Instruction, ops: list[ir.Operand], dst_space: str,
                  src_space: str) -> None:
    op = next((o for o in REDUCE_OPS if ins.has(o)), None)
    t = ins.type
    if op is None or t not in ATOM_TYPE_CODES or not src_space.startswith("shared"):
        raise cx.unsupported(f"the bulk reduction {ins.full_opcode}")
    flags = FLAGS["ATOM"][op] << FLAGS["ATOM_SHIFT"]
    flags |= core.TYPE_CODES[ATOM_TYPE_CODES[t]] << FLAGS["SRC_TYPE_SHIFT"]
    dst = cx.address_slot(ops[0], dst_space)
    src = cx.address_slot(ops[1], src_space)
    size = cx.src(ops[2], "u32")
    if dst_space == "global":
        cx.emit("cp.reduce.async.bulk.global.shared", [dst, src, size], flags=flags, size=TYPE_SIZES[t])
        return
    if len(ops) < 4:
        raise cx.unsupported(f"{ins.full_opcode} without its mbarrier")
    bar = cx.address_slot(ops[3], "shared::cluster")
    cx.emit("cp.reduce.async.bulk.shared.shared", [dst, src, size, bar], flags=flags, size=TYPE_SIZES[t])


@ASYNC_COPY.lowers("cp")
def lower_cp(cx: FunctionLowering, ins: ir.Instruction) -> None:
    """cp.async (Ampere's asynchronous global-to-shared copy), done at once; its
    commit/wait group instructions then have nothing to wait for. Hopper's bulk
    copies (cp.async.bulk, cp.reduce.async.bulk): lower_bulk above."""
    if ins.has("bulk"):
        lower_bulk(cx, ins)
        return
    if ins.has("async") and ins.has("mbarrier") and ins.has("arrive"):
        # The barrier tracks this thread's earlier cp.async copies, all done already:
        # without .noinc its pending count goes up by one and the copies' arrival
        # takes it back down; with .noinc the arrival counts as one of the phase's.
        if ins.has("noinc"):
            space, base, offset = cx.address(ins.operands[0], ins.state_space)
            cx.emit(f"mbarrier.arrive.{space}", [NO_SLOT, NO_SLOT, NO_SLOT, NO_SLOT, base], imm=offset)
        else:
            cx.emit("nop", [])
        return
    if not ins.has("async") or ins.has("mbarrier"):
        raise cx.unsupported(ins.full_opcode)
    if ins.has("commit_group") or ins.has("wait_group") or ins.has("wait_all"):
        cx.emit("nop", [])
        return
    ops = list(ins.operands)
    if len(ops) < 3 or not isinstance(ops[2], ir.Immediate):
        raise cx.unsupported(f"{ins.full_opcode} without a literal copy size")
    if ins.has("L2::cache_hint"):
        ops.pop()  # the cache policy operand: a hint
    dst_space, dst_base, dst_offset = cx.address(ops[0], "shared")
    src_space, src_base, src_offset = cx.address(ops[1], "global")
    if dst_space != "shared" or src_space != "global":
        raise cx.unsupported(f"{ins.full_opcode} between .{dst_space} and .{src_space}")
    src_size = ignore = NO_SLOT
    if len(ops) == 4:
        if isinstance(ops[3], ir.Register) and cx.register_type(ops[3]) == "pred":
            ignore = cx.reg(ops[3])
        else:
            src_size = cx.src(ops[3], "u32")
    slots = [src_size, ignore, NO_SLOT, NO_SLOT, dst_base, src_base]
    cx.emit("cp.async", slots, imm=dst_offset, imm2=src_offset, size=int(ops[2].value))
