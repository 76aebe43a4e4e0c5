"""Lowering of the tensor-core instructions (csrc/src/emulator/matrix_multiply.h
says what they compute and where each fragment element lives).

    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d..}, {a..}, {b..}, {c..}
    mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32 ...
    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {d..}, a-desc, b-desc, p, 1, 1, 0, 1
    wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {d..}, {a..}, b-desc, p, 1, 1, 1
    wgmma.fence.sync.aligned / commit_group / wait_group N

mma.sync takes the m16n8 and m8n8 shapes of f16, bf16, tf32, f64, e4m3/e5m2 and
s8/u8/s4/u4 with .row.col operands; not Volta's m8n8k4 f16 (its quad-pair
layout), the b1 forms, nor mma.sp (sparse). wgmma takes m64nNk* of f16, bf16,
tf32, e4m3/e5m2 and s8/u8 (not b1). The operands (up to 131 registers) go to a
slot list of the program; imm names it, imm2 packs the shape and types.
"""
from __future__ import annotations

import re

from ptx_passes import ir
from tally._core import emulator as core
from tally.backends.emulator.context import NO_SLOT, FunctionLowering, Lowerers

MATRIX_MULTIPLY = Lowerers()

MMA_TYPES: dict[str, int] = dict(core.MMA_TYPES)
_BITS = {"f64": 64, "f32": 32, "tf32": 32, "s32": 32, "f16": 16, "bf16": 16, "s8": 8, "u8": 8,
         "e4m3": 8, "e5m2": 8, "s4": 4, "u4": 4}
_INTEGER = frozenset({"s8", "u8", "s4", "u4"})
_FP8 = frozenset({"e4m3", "e5m2"})
_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)$")
# wgmma: K by input type, and the accumulator types each input type allows.
_WGMMA_K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}
_WGMMA_D = {"f16": {"f16", "f32"}, "bf16": {"f32"}, "tf32": {"f32"}, "e4m3": {"f16", "f32"},
            "e5m2": {"f16", "f32"}, "s8": {"s32"}, "u8": {"s32"}}


def pack_shape(a: str, b: str, c: str, d: str, m: int, n: int, k: int, *, satfinite: bool = False,
               a_registers: bool = False, negate_a: bool = False, negate_b: bool = False,
               transpose_a: bool = False, transpose_b: bool = False) -> int:
    """The MmaShape bits of matrix_multiply.h (MmaShape::unpack reads them)."""
    v = MMA_TYPES[a] | MMA_TYPES[b] << 4 | MMA_TYPES[c] << 8 | MMA_TYPES[d] << 12
    v |= m << 16 | n << 24 | k << 33
    for bit, on in enumerate((satfinite, a_registers, negate_a, negate_b, transpose_a, transpose_b)):
        v |= int(on) << (42 + bit)
    return v


def per_register(type_name: str) -> int:
    return 1 if _BITS[type_name] >= 32 else 32 // _BITS[type_name]


def registers_for(elements: int, type_name: str) -> int:
    per = 2 if type_name == "f16" else per_register(type_name)
    return -(-elements // per)


def _shape(cx: FunctionLowering, ins: ir.Instruction) -> tuple[int, int, int]:
    for q in ins.modifiers:
        found = _SHAPE.match(q)
        if found:
            return int(found[1]), int(found[2]), int(found[3])
    raise cx.unsupported(f"{ins.full_opcode} without a shape")


def _types(ins: ir.Instruction) -> list[str]:
    return [q for q in ins.modifiers if q in _BITS]


def _elements(op: ir.Operand) -> tuple[ir.Operand, ...]:
    return op.elements if isinstance(op, ir.Vector) else (op,)


def _same_family(a: str, b: str) -> bool:
    if a in _FP8 or b in _FP8:
        return a in _FP8 and b in _FP8
    if a in _INTEGER or b in _INTEGER:
        return a in _INTEGER and b in _INTEGER and _BITS[a] == _BITS[b]
    return a == b


def _sources(cx: FunctionLowering, op: ir.Operand, type_name: str, count: int, what: str) -> list[int]:
    elements = _elements(op)
    if len(elements) != count:
        raise cx.unsupported(f"{cx.ins.full_opcode} with {len(elements)} {what} registers (its shape needs {count})")
    return [cx.src(e, "f32" if type_name in ("f32", "tf32") else None) for e in elements]


def _destinations(cx: FunctionLowering, op: ir.Operand, count: int) -> list[int]:
    elements = _elements(op)
    if len(elements) != count:
        raise cx.unsupported(f"{cx.ins.full_opcode} with {len(elements)} destination registers (its shape needs {count})")
    return [cx.dst(e) for e in elements]


@MATRIX_MULTIPLY.lowers("mma")
def lower_mma(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if not ins.has("sync") or ins.has("sp") or any(q.startswith("kind") for q in ins.modifiers):
        raise cx.unsupported(f"{ins.full_opcode} (mma.sync's dense forms only)")
    m, n, k = _shape(cx, ins)
    types = _types(ins)
    if len(types) != 4:
        raise cx.unsupported(f"{ins.full_opcode} (expected the d, a, b and c types)")
    d, a, b, c = types
    e = per_register(a)
    if not (ins.has("row") and ins.has("col")) or n != 8 or m not in (8, 16) or not _same_family(a, b) \
            or k % (4 * e) or (m == 8 and k != 4 * e):
        raise cx.unsupported(f"{ins.full_opcode} (the m16n8 and m8n8 shapes with .row.col operands)")
    if a in _INTEGER and (c, d) != ("s32", "s32") or a == "f64" and (c, d) != ("f64", "f64") \
            or a not in _INTEGER and a != "f64" and {c, d} - {"f32", "f16"}:
        raise cx.unsupported(f"{ins.full_opcode} (accumulator types)")
    counts = (m * k // 32, k * n // 32, m * n // 32)
    dst, src_a, src_b, src_c = ins.operands
    slots = (_destinations(cx, dst, registers_for(counts[2], d))
             + _sources(cx, src_a, a, registers_for(counts[0], a), "A")
             + _sources(cx, src_b, b, registers_for(counts[1], b), "B")
             + _sources(cx, src_c, c, registers_for(counts[2], c), "C"))
    lists = cx.kernel.program.add_slot_list(slots)
    cx.emit("mma.sync", [], imm=lists, imm2=pack_shape(a, b, c, d, m, n, k, satfinite=ins.has("satfinite")))


@MATRIX_MULTIPLY.lowers("wgmma")
def lower_wgmma(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if ins.has("fence") or ins.has("commit_group") or ins.has("wait_group"):
        cx.emit("wgmma.ordering", [])
        return
    if not ins.has("mma_async") or ins.has("sp"):
        raise cx.unsupported(f"{ins.full_opcode} (wgmma.mma_async's dense forms, fence, commit_group, wait_group)")
    m, n, k = _shape(cx, ins)
    types = _types(ins)
    if len(types) != 3:
        raise cx.unsupported(f"{ins.full_opcode} (expected the d, a and b types)")
    d, a, b = types
    if a not in _WGMMA_K or not _same_family(a, b) or d not in _WGMMA_D[a] or m != 64 or n % 8 or not 8 <= n <= 256 \
            or k != _WGMMA_K[a]:
        raise cx.unsupported(f"{ins.full_opcode} (the m64nNk* forms of f16, bf16, tf32, e4m3/e5m2, s8/u8)")
    dst, src_a, desc_b, scale_d, *imms = ins.operands
    a_registers = isinstance(src_a, ir.Vector)
    transposable = a in ("f16", "bf16")
    wanted = (0 if a in _INTEGER else 2) + (int(transposable) * (1 if a_registers else 2))
    if len(imms) != wanted or not all(isinstance(i, ir.Immediate) for i in imms):
        raise cx.unsupported(f"{ins.full_opcode} with {len(imms)} immediate operands (its form takes {wanted})")
    values = [int(i.value) for i in imms]
    scales, transposes = values[:2] if a not in _INTEGER else [1, 1], values[2:]
    if any(v not in (1, -1) for v in scales) or any(v not in (0, 1) for v in transposes):
        raise cx.unsupported(f"{ins.full_opcode} with scale or transpose immediates outside -1/1 and 0/1")
    trans_a = bool(transposes[0]) if transposable and not a_registers else False
    trans_b = bool(transposes[-1]) if transposable else False
    c_count = (m // 4) * n // 32
    slots = _destinations(cx, dst, registers_for(c_count, d))
    slots += _sources(cx, src_a, a, 4, "A") if a_registers else [cx.src(src_a, "b64")]
    scale_slot, negated = cx.predicate(scale_d)
    if negated:
        raise cx.unsupported(f"{ins.full_opcode} with a negated scale-d predicate")
    slots += [cx.src(desc_b, "b64"), scale_slot]
    if NO_SLOT in slots[len(slots) - 2:]:
        raise cx.unsupported(f"{ins.full_opcode} with a sink operand")
    lists = cx.kernel.program.add_slot_list(slots)
    cx.emit("wgmma.mma_async", [], imm=lists,
            imm2=pack_shape(a, b, d, d, m, n, k, satfinite=ins.has("satfinite"), a_registers=a_registers,
                            negate_a=scales[0] == -1, negate_b=scales[1] == -1, transpose_a=trans_a,
                            transpose_b=trans_b))
