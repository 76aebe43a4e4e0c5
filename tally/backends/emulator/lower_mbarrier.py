"""Lowering of arrive-wait barriers (mbarrier) and nanosleep
(csrc/src/emulator/ops_mbarrier.cpp says what the object holds).

    mbarrier.init{.shared{::cta}}.b64 [a], count
    mbarrier.inval{.shared{::cta}}.b64 [a]
    mbarrier.arrive{_drop}{.expect_tx}{.sem}{.scope}{.space}.b64 state|_, [a]{, count|tx}
    mbarrier.expect_tx / complete_tx{.sem}{.scope}{.space}.b64 [a], tx
    mbarrier.test_wait / try_wait{.parity}{.sem}{.scope}{.space}.b64 p, [a], state|parity{, hint}
    mbarrier.pending_count.b64 count, state

Memory-order and scope qualifiers (.release, .acquire, .relaxed, .cta, .cluster)
change nothing here: every update is a sequentially consistent read-modify-write.
A `.shared::cluster` address may name another block's barrier (from mapa).
"""
from __future__ import annotations

from ptx_passes import ir
from tally.backends.emulator.context import NO_SLOT, FunctionLowering, Lowerers, normalize_space

MBARRIER = Lowerers()

_OPERATIONS = ("init", "inval", "arrive", "arrive_drop", "expect_tx", "complete_tx", "test_wait", "try_wait",
               "pending_count")


def _space_key(cx: FunctionLowering, ins: ir.Instruction, addr: ir.Operand) -> tuple[str, int, int]:
    space = normalize_space(ins.state_space)
    if space not in ("shared", "generic"):
        raise cx.unsupported(f"{ins.full_opcode} (an mbarrier lives in shared memory)")
    key_space, base, offset = cx.address(addr, ins.state_space)
    if key_space not in ("shared", "generic"):
        raise cx.unsupported(f"{ins.full_opcode} on a .{key_space} symbol")
    return key_space, base, offset


@MBARRIER.lowers("mbarrier")
def lower_mbarrier(cx: FunctionLowering, ins: ir.Instruction) -> None:
    operation = next((o for o in _OPERATIONS if ins.has(o)), None)
    if operation is None:
        raise cx.unsupported(ins.full_opcode)
    ops = list(ins.operands)
    if operation == "pending_count":
        d, state = ops
        cx.emit("mbarrier.pending_count", [cx.dst(d), cx.src(state, "b64")])
        return
    if operation in ("init", "inval", "expect_tx", "complete_tx"):
        addr, *rest = ops
        space, base, offset = _space_key(cx, ins, addr)
        value = cx.src(rest[0], "u32") if rest else NO_SLOT
        if operation in ("init", "expect_tx", "complete_tx") and value == NO_SLOT:
            raise cx.unsupported(f"{ins.full_opcode} without its count")
        cx.emit(f"mbarrier.{operation}.{space}", [NO_SLOT, value, NO_SLOT, NO_SLOT, base], imm=offset)
        return
    if operation in ("arrive", "arrive_drop"):
        d, addr, *rest = ops
        space, base, offset = _space_key(cx, ins, addr)
        count = tx = NO_SLOT
        if rest:
            # arrive.expect_tx's operand is the transaction bytes (one arrival); arrive's the count.
            if ins.has("expect_tx"):
                tx = cx.src(rest[0], "u32")
            else:
                count = cx.src(rest[0], "u32")
        elif ins.has("expect_tx"):
            raise cx.unsupported(f"{ins.full_opcode} without its transaction count")
        cx.emit(f"mbarrier.{operation}.{space}", [cx.dst(d), count, tx, NO_SLOT, base], imm=offset)
        return
    # test_wait / try_wait: the optional suspend-time hint of try_wait changes nothing.
    d, addr, waited, *_hint = ops
    space, base, offset = _space_key(cx, ins, addr)
    parity = ".parity" if ins.has("parity") else ""
    cx.emit(f"mbarrier.{operation}{parity}.{space}",
            [cx.dst(d), cx.src(waited, "u32" if parity else "b64"), NO_SLOT, NO_SLOT, base], imm=offset)


@MBARRIER.lowers("nanosleep")
def lower_nanosleep(cx: FunctionLowering, ins: ir.Instruction) -> None:
    """The sleeping warp gives up its turn to the others (a spin loop backing off)."""
    cx.emit("nanosleep", [])
