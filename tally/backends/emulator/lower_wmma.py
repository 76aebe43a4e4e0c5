"""Lowering of the warp matrix functions (csrc/src/emulator/ops_wmma.cpp runs them and
says how the emulator lays its fragments out):

    wmma.load.{a,b,c}.sync.aligned.{row,col}.shape{.global,.shared}.type {r..}, [p]{, stride}
    wmma.store.d.sync.aligned.{row,col}.shape{.global,.shared}.type [p], {r..}{, stride}
    wmma.mma.sync.aligned.{row,col}.{row,col}.shape.dtype.ctype d, a, b, c              (f16 inputs)
    wmma.mma.sync.aligned.{row,col}.{row,col}.shape.dtype.atype.btype.ctype{.satfinite} d, a, b, c
    wmma.mma.sync.aligned.{row,col}.{row,col}.m8n8k4.f64.f64.f64.f64.rn d, a, b, c

for the shapes m16n16k16, m32n8k16 and m8n32k16 of f16, bf16, s8 and u8, m16n16k8 of tf32
and m8n8k4 of f64. The sub-byte and single-bit forms (s4, u4, b1) are refused with the
instruction named.
"""
from __future__ import annotations

import re

from ptx_passes import ir
from tally._core import emulator as core
from tally.backends.emulator.context import NO_SLOT, FunctionLowering, Lowerers
from tally.backends.emulator.lower_matrix_multiply import pack_shape

WMMA = Lowerers()

MMA_TYPES: dict[str, int] = dict(core.MMA_TYPES)
_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)$")
_TYPES = ("f16", "bf16", "tf32", "f32", "f64", "s8", "u8", "s32")
_SHAPES = {(16, 16, 16), (32, 8, 16), (8, 32, 16), (16, 16, 8), (8, 8, 4)}
SPACES = {None: 0, "generic": 0, "global": 1, "shared": 2, "shared::cta": 2}


def _shape(cx: FunctionLowering, ins: ir.Instruction) -> tuple[int, int, int]:
    for q in ins.modifiers:
        found = _SHAPE.match(q)
        if found:
            shape = (int(found[1]), int(found[2]), int(found[3]))
            if shape in _SHAPES:
                return shape
    raise cx.unsupported(f"{ins.full_opcode} (the emulator runs the m16n16k16, m32n8k16, m8n32k16, m16n16k8 "
                         f"and m8n8k4 shapes)")


def _types(cx: FunctionLowering, ins: ir.Instruction) -> list[str]:
    types = [q for q in ins.modifiers if q in _TYPES or q in ("s4", "u4", "b1")]
    if any(t in ("s4", "u4", "b1") for t in types):
        raise cx.unsupported(f"{ins.full_opcode} (sub-byte and single-bit fragments are not emulated)")
    return types


def _registers(cx: FunctionLowering, op: ir.Operand, sources: bool, type_name: str) -> list[int]:
    elements = op.elements if isinstance(op, ir.Vector) else (op,)
    if sources:
        return [cx.src(e, "f32" if type_name in ("f32", "tf32") else None) for e in elements]
    return [cx.dst(e) for e in elements]


def _fragment(cx: FunctionLowering, ins: ir.Instruction, regs: ir.Operand, address: ir.Operand,
              stride: ir.Operand | None, loading: bool) -> None:
    m, n, k = _shape(cx, ins)
    which = next((q for q in ("a", "b", "c", "d") if ins.has(q)), None)
    types = _types(cx, ins)
    layout = next((q for q in ("row", "col") if ins.has(q)), None)
    if which is None or len(types) != 1 or layout is None:
        raise cx.unsupported(ins.full_opcode)
    rows, cols = {"a": (m, k), "b": (k, n)}.get(which, (m, n))
    space = ins.state_space
    if space not in SPACES:
        raise cx.unsupported(f"{ins.full_opcode} (the .{space} state space)")
    registers = _registers(cx, regs, not loading, types[0])
    stride_slot = NO_SLOT if stride is None else cx.src(stride, "u32")
    slots = registers + [cx.address_slot(address, space), stride_slot]
    packed = (rows | cols << 8 | MMA_TYPES[types[0]] << 16 | int(layout == "col") << 20 | SPACES[space] << 21
              | len(registers) << 24)
    cx.emit("wmma.load" if loading else "wmma.store", [], imm=cx.kernel.program.add_slot_list(slots), imm2=packed)


@WMMA.lowers("wmma")
def lower_wmma(cx: FunctionLowering, ins: ir.Instruction) -> None:
    ops = ins.operands
    if not ins.has("sync"):
        raise cx.unsupported(ins.full_opcode)
    if ins.has("load"):
        _fragment(cx, ins, ops[0], ops[1], ops[2] if len(ops) > 2 else None, loading=True)
        return
    if ins.has("store"):
        _fragment(cx, ins, ops[1], ops[0], ops[2] if len(ops) > 2 else None, loading=False)
        return
    if not ins.has("mma") or len(ops) != 4:
        raise cx.unsupported(ins.full_opcode)
    m, n, k = _shape(cx, ins)
    types = _types(cx, ins)
    if len(types) == 2:
        d, c = types
        a = b = "f16"
    elif len(types) == 4:
        d, a, b, c = types
    else:
        raise cx.unsupported(f"{ins.full_opcode} (its types)")
    groups = [_registers(cx, ops[0], False, d), _registers(cx, ops[1], True, a), _registers(cx, ops[2], True, b),
              _registers(cx, ops[3], True, c)]
    nd, na, nb, nc = (len(g) for g in groups)
    if max(nd, na, nb, nc) > 0xff:
        raise cx.unsupported(ins.full_opcode)
    lists = cx.kernel.program.add_slot_list([s for g in groups for s in g])
    cx.emit("wmma.mma", [], imm=lists, imm2=pack_shape(a, b, c, d, m, n, k, satfinite=ins.has("satfinite")),
            flags=na | nb << 8 | nc << 16 | nd << 24)
