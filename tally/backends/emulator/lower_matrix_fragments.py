"""Lowering of ldmatrix / stmatrix (csrc/src/emulator/ops_matrix_fragments.cpp
says what they move where).

    ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16 {r...}, [a]
    stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16 [a], {r...}

Without a state space the row addresses are generic. The b8 forms (m16n16,
m8n16, m16n8) are refused by name.
"""
from __future__ import annotations

from ptx_passes import ir
from tally.backends.emulator.context import NO_SLOT, FunctionLowering, Lowerers

MATRIX_FRAGMENTS = Lowerers()

TRANS_FLAG = 1 << 16  # ops_matrix_fragments.cpp, kTrans
_COUNTS = {"x1": 1, "x2": 2, "x4": 4}


@MATRIX_FRAGMENTS.lowers("ldmatrix", "stmatrix")
def lower_matrix(cx: FunctionLowering, ins: ir.Instruction) -> None:
    count = next((n for q, n in _COUNTS.items() if ins.has(q)), None)
    if count is None or not ins.has("m8n8") or ins.type != "b16":
        raise cx.unsupported(f"{ins.full_opcode} (only the m8n8 .b16 forms)")
    load = ins.opcode == "ldmatrix"
    regs, addr = (ins.operands[0], ins.operands[1]) if load else (ins.operands[1], ins.operands[0])
    elements = regs.elements if isinstance(regs, ir.Vector) else (regs,)
    if len(elements) != count:
        raise cx.unsupported(f"{ins.full_opcode} with {len(elements)} registers")
    space, base, offset = cx.address(addr, ins.state_space)
    if space not in ("shared", "generic"):
        raise cx.unsupported(f"{ins.full_opcode} on a .{space} address (matrices live in shared memory)")
    slots = [cx.dst(e) if load else cx.src(e, "b32") for e in elements]
    if load and NO_SLOT in slots:
        raise cx.unsupported(f"{ins.full_opcode} with a sink destination")
    cx.emit(f"{ins.opcode}.{space}", slots + [NO_SLOT] * (4 - count) + [base], imm=offset,
            flags=TRANS_FLAG if ins.has("trans") else 0, width=count, size=2)
