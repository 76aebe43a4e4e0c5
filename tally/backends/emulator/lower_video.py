"""Lowering of the SIMD video instructions (csrc/src/emulator/ops_video.cpp runs them):

    vop4.dtype.atype.btype{.sat} d, a, b, c      vop4 = vadd4 vsub4 vavrg4 vabsdiff4 vmin4 vmax4
    vop4.dtype.atype.btype.add   d, a, b, c
    vset4.atype.btype.cmp{.add}  d, a, b, c      (and the 2-way vop2 / vset2 on 16-bit lanes)

with the default lane selectors and mask (all lanes); an explicit mask or selector
(`d.b10`, `a.b3210`) and the scalar video instructions (vadd, vshl, vmad...) are
refused with the instruction named.
"""
from __future__ import annotations

from ptx_passes import ir
from tally.backends.emulator.context import FunctionLowering, Lowerers

VIDEO = Lowerers()

OPERATIONS = {"vadd": 0, "vsub": 1, "vavrg": 2, "vabsdiff": 3, "vmin": 4, "vmax": 5, "vset": 6}
COMPARISONS = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}
A_SIGNED, B_SIGNED, D_SIGNED, SAT, ADD = 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7


def _operand(cx: FunctionLowering, op: ir.Operand, ins: ir.Instruction) -> ir.Operand:
    if isinstance(op, ir.Register) and "." in op.name:
        raise cx.unsupported(f"{ins.full_opcode} with the lane selector or mask {op.name} (the emulator runs the "
                             f"default ones)")
    return op


@VIDEO.lowers(*(f"{name}{n}" for name in OPERATIONS for n in (2, 4)))
def lower_video(cx: FunctionLowering, ins: ir.Instruction) -> None:
    name, lanes = ins.opcode[:-1], int(ins.opcode[-1])
    types = ins.types
    is_set = name == "vset"
    if len(types) != (2 if is_set else 3) or any(t not in ("u32", "s32") for t in types) or len(ins.operands) != 4:
        raise cx.unsupported(ins.full_opcode)
    flags = OPERATIONS[name]
    if is_set:
        cmp = next((COMPARISONS[m] for m in ins.modifiers if m in COMPARISONS), None)
        if cmp is None:
            raise cx.unsupported(f"{ins.full_opcode} without a comparison")
        flags |= cmp << 8
        a_type, b_type, d_type = types[0], types[1], "u32"
    else:
        d_type, a_type, b_type = types
    flags |= (A_SIGNED if a_type == "s32" else 0) | (B_SIGNED if b_type == "s32" else 0)
    flags |= D_SIGNED if d_type == "s32" else 0
    flags |= (SAT if ins.has("sat") else 0) | (ADD if ins.has("add") else 0)
    flags |= ((1 << lanes) - 1) << 12
    d, a, b, c = (_operand(cx, op, ins) for op in ins.operands)
    cx.emit("vsimd.b32", [cx.dst(d), cx.src(a, "u32"), cx.src(b, "u32"), cx.src(c, "u32")], flags=flags,
            size=32 // lanes)
