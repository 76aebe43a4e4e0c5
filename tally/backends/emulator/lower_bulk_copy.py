"""Lowering of sm_90's bulk asynchronous copies (csrc/src/emulator/ops_bulk_copy.cpp
and ops_tensor_copy.cpp run them):

    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{.multicast::cluster}{.L2::cache_hint}
        [dst], [src], size, [mbar]{, ctaMask}{, policy}
    cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]
    cp.async.bulk.global.shared::cta.bulk_group{.L2::cache_hint} [dst], [src], size{, policy}
    cp.reduce.async.bulk.<dst>.<src>.<completion>.<op>.<type> [dst], [src], size{, [mbar]}
    cp.async.bulk.commit_group, cp.async.bulk.wait_group{.read} N, cp.async.bulk.prefetch...
    cp.async.bulk.tensor.<n>d...: lower_tensor_copy.py

The copies happen when they are issued, so bulk groups have nothing to wait for;
cache hints and prefetches change nothing.
"""
from __future__ import annotations

from ptx_passes import ir
from ptx_passes.ir import TYPE_SIZES
from tally._core import emulator as core
from tally.backends.emulator.context import FLAGS, NO_SLOT, FunctionLowering
from tally.backends.emulator.lower_memory import ATOM_TYPE_CODES


def whole_address(cx: FunctionLowering, op: ir.Operand, space: str) -> tuple[str, int]:
    """(space key, slot holding base + offset) of a memory operand in `space`."""
    key_space, base, offset = cx.address(op, space)
    if offset == 0:
        return key_space, base
    slot = cx.temp()
    cx.emit("add.u64", [slot, base, cx.const(offset)])
    return key_space, slot


def _spaces(ins: ir.Instruction) -> tuple[str, str]:
    """(destination, source) state spaces, in the order the modifiers name them."""
    named = [m for m in ins.modifiers if m in ("global", "shared::cluster", "shared::cta", "shared")]
    if len(named) != 2:
        raise ValueError(ins.full_opcode)
    return named[0], named[1]


def _drop_hints(cx: FunctionLowering, ins: ir.Instruction, ops: list[ir.Operand]) -> list[ir.Operand]:
    if ins.has("L2::cache_hint"):
        return ops[:-1]   # the cache policy: a hint
    return ops


def lower_bulk(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if ins.has("tensor"):
        from tally.backends.emulator.lower_tensor_copy import lower_tensor_copy
        lower_tensor_copy(cx, ins)
        return
    if ins.has("commit_group") or ins.has("wait_group") or ins.has("prefetch"):
        cx.emit("nop", [])
        return
    try:
        dst_space, src_space = _spaces(ins)
    except ValueError:
        raise cx.unsupported(ins.full_opcode) from None
    ops = _drop_hints(cx, ins, list(ins.operands))
    if ins.has("reduce"):
        _lower_reduce(cx, ins, ops, dst_space, src_space)
        return
    if len(ops) < 3:
        raise cx.unsupported(f"{ins.full_opcode} with {len(ins.operands)} operands")
    _, dst = whole_address(cx, ops[0], dst_space)
    _, src = whole_address(cx, ops[1], src_space)
    size = cx.src(ops[2], "u32")
    if dst_space == "global":
        cx.emit("cp.async.bulk.global.shared", [dst, src, size])
        return
    if len(ops) < 4 or not ins.has("mbarrier::complete_tx::bytes"):
        raise cx.unsupported(f"{ins.full_opcode} (a copy into shared memory completes on an mbarrier)")
    _, bar = whole_address(cx, ops[3], "shared::cluster")
    mask = NO_SLOT
    if ins.has("multicast::cluster"):
        if len(ops) < 5:
            raise cx.unsupported(f"{ins.full_opcode} without its CTA mask")
        mask = cx.src(ops[4], "u16")
    source = "global" if src_space == "global" else "shared"
    cx.emit(f"cp.async.bulk.shared.{source}", [dst, src, size, bar, mask])


REDUCE_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")


def _lower_reduce(cx: FunctionLowering, ins: ir.Instruction, ops: list[ir.Operand], dst_space: str,
                  src_space: str) -> None:
    op = next((o for o in REDUCE_OPS if ins.has(o)), None)
    t = ins.type
    if op is None or t not in ATOM_TYPE_CODES or not src_space.startswith("shared"):
        raise cx.unsupported(f"the bulk reduction {ins.full_opcode}")
    flags = FLAGS["ATOM"][op] << FLAGS["ATOM_SHIFT"]
    flags |= core.TYPE_CODES[ATOM_TYPE_CODES[t]] << FLAGS["SRC_TYPE_SHIFT"]
    _, dst = whole_address(cx, ops[0], dst_space)
    _, src = whole_address(cx, ops[1], src_space)
    size = cx.src(ops[2], "u32")
    if dst_space == "global":
        cx.emit("cp.reduce.async.bulk.global.shared", [dst, src, size], flags=flags, size=TYPE_SIZES[t])
        return
    if len(ops) < 4:
        raise cx.unsupported(f"{ins.full_opcode} without its mbarrier")
    _, bar = whole_address(cx, ops[3], "shared::cluster")
    cx.emit("cp.reduce.async.bulk.shared.shared", [dst, src, size, bar], flags=flags, size=TYPE_SIZES[t])
