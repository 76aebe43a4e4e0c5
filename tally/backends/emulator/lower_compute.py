"""Lowering of computational instructions: integer, float and half arithmetic,
logic and bit operations, comparisons and selects, conversions and moves.

Handler keys are "<op>[.<variant>].<type>" (see csrc/src/emulator/ops_*.cpp);
integer arithmetic takes the signed/unsigned spelling (.b32 -> .u32), logic
the bit-size spelling.
"""
from __future__ import annotations

from ptx_passes import ir
from tally._core import emulator as core
from tally.backends.emulator.context import FLAGS, FLOAT_TYPES, NO_SLOT, FunctionLowering, Lowerers

# This family's instructions by opcode (lowering.py joins the families).
COMPUTE = Lowerers()

INT_TYPES = frozenset({"s16", "u16", "s32", "u32", "s64", "u64", "b16", "b32", "b64"})
PACKED_INT_TYPES = frozenset({"u16x2", "s16x2"})     # two 16-bit halves of a .b32 register (min, max)
HALF_TYPES = frozenset({"f16", "f16x2", "bf16", "bf16x2"})
ROUND = FLAGS["ROUND"]


def arith_type(t: str) -> str:
    """.b32 -> .u32 (bit-size types compute as unsigned); other types unchanged."""
    return "u" + t[1:] if t in ("b8", "b16", "b32", "b64") else t


def rounding_flags(ins: ir.Instruction) -> int:
    flags = 0
    r = ins.rounding
    if r is not None:
        flags |= ROUND[r]
    if ins.has("ftz"):
        flags |= FLAGS["FTZ"]
    if ins.has("sat") or ins.has("satfinite"):
        flags |= FLAGS["SAT"]
    if ins.has("approx"):
        flags |= FLAGS["APPROX"]
    if ins.has("relu"):
        flags |= FLAGS["RELU"]
    return flags


def _type(cx: FunctionLowering, ins: ir.Instruction) -> str:
    t = ins.type
    if t is None:
        raise cx.unsupported(f"{ins.full_opcode} without a type")
    return t


def _sources(cx: FunctionLowering, ins: ir.Instruction, t: str, count: int) -> list[int]:
    if len(ins.operands) != count + 1:
        raise cx.unsupported(f"{ins.full_opcode} with {len(ins.operands)} operands")
    return [cx.dst(ins.operands[0])] + [cx.src(op, t) for op in ins.operands[1:]]


# --------------------------------------------------------------------------- arithmetic

ARITY = {"add": 2, "sub": 2, "mul": 2, "mad": 3, "fma": 3, "div": 2, "rem": 2, "abs": 1, "neg": 1,
         "min": 2, "max": 2, "sad": 3, "mul24": 2, "mad24": 3, "rcp": 1, "sqrt": 1, "rsqrt": 1,
         "sin": 1, "cos": 1, "ex2": 1, "lg2": 1, "tanh": 1, "copysign": 2}


@COMPUTE.lowers(*ARITY)
def lower_arith(cx: FunctionLowering, ins: ir.Instruction) -> None:
    op = ins.opcode
    t = _type(cx, ins)
    if op in ("min", "max") and ins.has("xorsign"):
        raise cx.unsupported(f"{ins.full_opcode}")
    if t in FLOAT_TYPES:
        ops = _sources(cx, ins, t, ARITY[op])
        nan = ".nan" if op in ("min", "max") and ins.has("NaN") else ""
        cx.emit(f"{op}{nan}.{t}", ops, flags=rounding_flags(ins))
        return
    if op in ("min", "max") and (t in PACKED_INT_TYPES or ins.has("relu")):
        return _packed_or_relu_min_max(cx, ins, op, t)
    if t not in INT_TYPES:
        raise cx.unsupported(f"{ins.full_opcode}")
    t = arith_type(t)
    if op in ("add", "sub") and (ins.has("cc") or op in ("addc", "subc")):
        return _carry(cx, ins, f"{op}.cc.{t}")
    variant = ""
    if op in ("mul", "mad", "mul24", "mad24"):
        for v in ("lo", "hi", "wide"):
            if ins.has(v):
                variant = "." + v
        if not variant:
            raise cx.unsupported(f"{ins.full_opcode} without .lo/.hi/.wide")
        if op == "mad" and ins.has("cc"):
            if variant == ".wide":
                raise cx.unsupported(f"{ins.full_opcode}")
            return _carry(cx, ins, f"mad{variant}.cc.{t}", sources=3)
    ops = _sources(cx, ins, t, ARITY[op])
    cx.emit(f"{op}{variant}.{t}", ops)


def _packed_or_relu_min_max(cx: FunctionLowering, ins: ir.Instruction, op: str, t: str) -> None:
    """sm_90's min/max forms (DPX): both 16-bit halves of a .b32 register at once
    (.u16x2, .s16x2), and .relu (result clamped at 0) on .s16x2 and .s32."""
    relu = ins.has("relu")
    if relu and t not in ("s16x2", "s32"):
        raise cx.unsupported(ins.full_opcode)
    register_type = "u32" if t in PACKED_INT_TYPES else t
    cx.emit(f"{op}{'.relu' if relu else ''}.{t}", _sources(cx, ins, register_type, 2))


@COMPUTE.lowers("addc", "subc")
def lower_carry_in(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = arith_type(_type(cx, ins))
    _carry(cx, ins, f"{ins.opcode}{'.cc' if ins.has('cc') else ''}.{t}")


@COMPUTE.lowers("madc")
def lower_madc(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    half = next((h for h in ("lo", "hi") if ins.has(h)), None)
    if t not in INT_TYPES or half is None:
        raise cx.unsupported(ins.full_opcode)
    _carry(cx, ins, f"madc.{half}{'.cc' if ins.has('cc') else ''}.{arith_type(t)}", sources=3)


def _carry(cx: FunctionLowering, ins: ir.Instruction, key: str, sources: int = 2) -> None:
    t = key.rsplit(".", 1)[1]
    ops = _sources(cx, ins, t, sources)
    cx.emit(key, ops + [cx.carry_slot()])


# --------------------------------------------------------------------------- logic and bits


@COMPUTE.lowers("and", "or", "xor")
def lower_logic(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    cx.emit(f"{ins.opcode}.{_bits(cx, ins, t)}", _sources(cx, ins, t, 2))


@COMPUTE.lowers("not", "cnot")
def lower_not(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    cx.emit(f"{ins.opcode}.{_bits(cx, ins, t)}", _sources(cx, ins, t, 1))


def _bits(cx: FunctionLowering, ins: ir.Instruction, t: str) -> str:
    if t == "pred":
        return "pred"
    size = {"16": "b16", "32": "b32", "64": "b64"}.get(t[1:])
    if size is None:
        raise cx.unsupported(ins.full_opcode)
    return size


@COMPUTE.lowers("shl", "shr")
def lower_shift(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    d, a, b = ins.operands
    key_type = t if ins.opcode == "shr" and t[0] in "su" else _bits(cx, ins, t)
    cx.emit(f"{ins.opcode}.{key_type}", [cx.dst(d), cx.src(a, t), cx.src(b, "u32")])


@COMPUTE.lowers("bfe")
def lower_bfe(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    d, a, b, c = ins.operands
    cx.emit(f"bfe.{t}", [cx.dst(d), cx.src(a, t), cx.src(b, "u32"), cx.src(c, "u32")])


@COMPUTE.lowers("bmsk")
def lower_bmsk(cx: FunctionLowering, ins: ir.Instruction) -> None:
    mode = next((m for m in ("clamp", "wrap") if ins.has(m)), None)
    if mode is None or ins.type != "b32":
        raise cx.unsupported(ins.full_opcode)
    cx.emit(f"bmsk.{mode}.b32", _sources(cx, ins, "u32", 2))


@COMPUTE.lowers("bfi")
def lower_bfi(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    d, f, b, c, n = ins.operands
    cx.emit(f"bfi.{t}", [cx.dst(d), cx.src(f, t), cx.src(b, t), cx.src(c, "u32"), cx.src(n, "u32")])


@COMPUTE.lowers("brev", "clz", "popc")
def lower_bit_count(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    cx.emit(f"{ins.opcode}.{t}", _sources(cx, ins, t, 1))


@COMPUTE.lowers("bfind")
def lower_bfind(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    flags = FLAGS["SHIFT_AMOUNT"] if ins.has("shiftamt") else 0
    cx.emit(f"bfind.{t}", _sources(cx, ins, t, 1), flags=flags)


@COMPUTE.lowers("prmt")
def lower_prmt(cx: FunctionLowering, ins: ir.Instruction) -> None:
    mode = 0
    for name, value in FLAGS["PRMT"].items():
        if ins.has(name):
            mode = value
    cx.emit("prmt.b32", _sources(cx, ins, "b32", 3), flags=mode << FLAGS["PRMT_SHIFT"])


@COMPUTE.lowers("lop3")
def lower_lop3(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if len(ins.operands) != 5 or not isinstance(ins.operands[4], ir.Immediate):
        raise cx.unsupported("lop3 without an immediate lookup table (or with a predicate output)")
    d, a, b, c, lut = ins.operands
    cx.emit("lop3.b32", [cx.dst(d), cx.src(a), cx.src(b), cx.src(c)], imm=int(lut.value) & 0xFF)


@COMPUTE.lowers("shf")
def lower_shf(cx: FunctionLowering, ins: ir.Instruction) -> None:
    flags = (FLAGS["SHF_LEFT"] if ins.has("l") else 0) | (FLAGS["SHF_CLAMP"] if ins.has("clamp") else 0)
    cx.emit("shf.b32", _sources(cx, ins, "b32", 3), flags=flags)


@COMPUTE.lowers("dp4a", "dp2a")
def lower_dot(cx: FunctionLowering, ins: ir.Instruction) -> None:
    types = ins.types
    if len(types) != 2 or len(ins.operands) != 4:
        raise cx.unsupported(ins.full_opcode)
    flags = (FLAGS["DOT_SIGNED_A"] if types[0] == "s32" else 0) | (FLAGS["DOT_SIGNED_B"] if types[1] == "s32" else 0)
    if ins.opcode == "dp2a" and ins.has("hi"):
        flags |= FLAGS["DOT2_HIGH"]
    cx.emit(ins.opcode, _sources(cx, ins, "u32", 3), flags=flags)


@COMPUTE.lowers("testp")
def lower_testp(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    kind = next((k for k in FLAGS["TEST"] if ins.has(k)), None)
    if kind is None:
        raise cx.unsupported(ins.full_opcode)
    d, a = ins.operands
    cx.emit(f"testp.{t}", [cx.dst(d), cx.src(a, t)], flags=FLAGS["TEST"][kind] << FLAGS["TEST_SHIFT"])


# --------------------------------------------------------------------------- comparisons


def _compare_flags(cx: FunctionLowering, ins: ir.Instruction) -> int:
    cmp = ins.comparison
    if cmp is None:
        raise cx.unsupported(f"{ins.full_opcode} without a comparison")
    flags = FLAGS["CMP"][cmp] << FLAGS["CMP_SHIFT"]
    for name, value in FLAGS["BOOL"].items():
        if ins.has(name):
            flags |= value << FLAGS["BOOL_SHIFT"]
    if ins.has("ftz"):
        flags |= FLAGS["FTZ"]
    return flags


@COMPUTE.lowers("setp")
def lower_setp(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    flags = _compare_flags(cx, ins)
    dest = ins.operands[0]
    p, q = (dest.first, dest.second) if isinstance(dest, ir.PredPair) else (dest, ir.Sink())
    a, b = ins.operands[1], ins.operands[2]
    c_slot = NO_SLOT
    if len(ins.operands) == 4:
        c_slot, negated = cx.predicate(ins.operands[3])
        if negated:
            flags |= FLAGS["NEGATE_C"]
    cx.emit(f"setp.{t}", [cx.dst(p), cx.dst(q), cx.src(a, t), cx.src(b, t), c_slot], flags=flags)


@COMPUTE.lowers("set")
def lower_set(cx: FunctionLowering, ins: ir.Instruction) -> None:
    types = ins.types
    if len(types) != 2:
        raise cx.unsupported(f"{ins.full_opcode}")
    dtype, stype = types
    flags = _compare_flags(cx, ins)
    if dtype == "f32":
        flags |= FLAGS["SET_FLOAT_RESULT"]
    d, a, b = ins.operands[:3]
    c_slot = NO_SLOT
    if len(ins.operands) == 4:
        c_slot, negated = cx.predicate(ins.operands[3])
        if negated:
            flags |= FLAGS["NEGATE_C"]
    cx.emit(f"set.{stype}", [cx.dst(d), NO_SLOT, cx.src(a, stype), cx.src(b, stype), c_slot], flags=flags)


@COMPUTE.lowers("selp")
def lower_selp(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    d, a, b, c = ins.operands
    cx.emit("selp", [cx.dst(d), cx.src(a, t), cx.src(b, t), cx.predicate(c)[0]])


@COMPUTE.lowers("slct")
def lower_slct(cx: FunctionLowering, ins: ir.Instruction) -> None:
    types = ins.types
    dtype, ctype = types[0], types[-1]
    d, a, b, c = ins.operands
    flags = FLAGS["FTZ"] if ins.has("ftz") else 0
    cx.emit(f"slct.{ctype}", [cx.dst(d), cx.src(a, dtype), cx.src(b, dtype), cx.src(c, ctype)], flags=flags)


# --------------------------------------------------------------------------- conversions and moves

TYPE_CODES = core.TYPE_CODES


def _type_code(cx: FunctionLowering, t: str) -> int:
    code = TYPE_CODES.get(arith_type(t) if t in ("b8", "b16", "b32", "b64") else t)
    if code is None:
        raise cx.unsupported(f"conversions involving .{t}")
    return code


PACKED_8BIT_CONVERSIONS = frozenset({
    ("e4m3x2", "f32"), ("e5m2x2", "f32"), ("e4m3x2", "f16x2"), ("e5m2x2", "f16x2"),
    ("f16x2", "e4m3x2"), ("f16x2", "e5m2x2"),
    ("ue8m0x2", "f32"), ("ue8m0x2", "bf16x2"), ("bf16x2", "ue8m0x2"),
})


@COMPUTE.lowers("cvt")
def lower_cvt(cx: FunctionLowering, ins: ir.Instruction) -> None:
    types = ins.types
    if len(types) != 2:
        raise cx.unsupported(f"{ins.full_opcode}")
    dtype, stype = types
    if (dtype, stype) == ("tf32", "f32"):
        rounding = next((code for code, name in enumerate(("rna", "rn", "rz")) if ins.has(name)), None)
        if rounding is None or len(ins.operands) != 2:
            raise cx.unsupported(f"{ins.full_opcode} (tf32 conversions round with .rna, .rn or .rz)")
        flags = rounding | (4 if ins.has("satfinite") else 0) | (8 if ins.has("relu") else 0)
        cx.emit("cvt.tf32.f32", _sources(cx, ins, "f32", 1), flags=flags)
        return
    flags = rounding_flags(ins)
    if (dtype, stype) in PACKED_8BIT_CONVERSIONS:
        # fp8 / ue8m0 pairs (csrc/src/emulator/ops_fp8.cpp): two f32 sources, or one packed source
        sources = 2 if stype == "f32" else 1
        if len(ins.operands) != sources + 1:
            raise cx.unsupported(ins.full_opcode)
        cx.emit(f"cvt.{dtype}.{stype}", _sources(cx, ins, "f32" if stype == "f32" else "b32", sources), flags=flags)
        return
    if dtype in ("f16x2", "bf16x2"):
        if stype != "f32" or len(ins.operands) != 3:
            raise cx.unsupported(ins.full_opcode)
        d, a, b = ins.operands
        cx.emit(f"cvt.pack.{dtype}", [cx.dst(d), cx.src(a, "f32"), cx.src(b, "f32")], flags=flags)
        return
    flags |= _type_code(cx, dtype) << FLAGS["DST_TYPE_SHIFT"]
    flags |= _type_code(cx, stype) << FLAGS["SRC_TYPE_SHIFT"]
    d, a = ins.operands
    cx.emit("cvt", [cx.dst(d), cx.src(a, stype)], flags=flags)


@COMPUTE.lowers("mov")
def lower_mov(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = _type(cx, ins)
    d, a = ins.operands
    if isinstance(a, ir.Vector):  # pack {a, b, ...} into d
        size = _element_bytes(cx, t, len(a.elements))
        elements = [cx.src(e, None) if not isinstance(e, ir.Sink) else NO_SLOT for e in a.elements]
        cx.emit("mov.pack", [cx.dst(d)] + elements, width=len(elements), size=size)
        return
    if isinstance(d, ir.Vector):  # unpack a into {d0, d1, ...}
        size = _element_bytes(cx, t, len(d.elements))
        dests = [cx.dst(e) for e in d.elements]
        cx.emit("mov.unpack", dests + [NO_SLOT] * (4 - len(dests)) + [cx.src(a, None)],
                width=len(dests), size=size)
        return
    cx.emit("mov", [cx.dst(d), cx.src(a, t)])


def _element_bytes(cx: FunctionLowering, t: str, count: int) -> int:
    total = {"b16": 2, "b32": 4, "b64": 8, "u16": 2, "u32": 4, "u64": 8, "s16": 2, "s32": 4,
             "s64": 8, "f32": 4, "f64": 8, "b128": 16}.get(t)
    if total is None or count not in (2, 4) or total // count == 0 or total > 8:
        raise cx.unsupported(f"a {count}-element vector move of .{t}")
    return total // count
