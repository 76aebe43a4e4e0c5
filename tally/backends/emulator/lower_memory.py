"""Lowering of memory instructions: ld/ldu/st (scalar and vector), atom/red,
cvta, isspacep, mapa/getctarank (cluster shared memory), fences and hints.
.shared::cluster accesses are .shared accesses: the address says which block's.

Keys name the resolved state space: "ld.global", "st.frame", "atom.shared"...
(see csrc/src/emulator/ops_memory.cpp for the spaces). `.const` data lives in
device memory like `.global` data, so const accesses are global accesses.
"""
from __future__ import annotations

from ptx_passes import ir
from ptx_passes.ir import TYPE_SIZES
from tally._core import emulator as core
from tally.backends.emulator.context import (
    FLAGS,
    NO_SLOT,
    FunctionLowering,
    Lowerers,
    normalize_space,
)

# This family's instructions by opcode (lowering.py joins the families).
MEMORY = Lowerers()

SIGNED_TYPES = frozenset({"s8", "s16", "s32", "s64"})


def _order_flags(ins: ir.Instruction) -> int:
    order = ins.memory_order
    if order is None:
        return 0
    return FLAGS["ORDER"][order] << FLAGS["ORDER_SHIFT"]


def _element(cx: FunctionLowering, ins: ir.Instruction) -> tuple[str, int]:
    t = ins.type
    size = TYPE_SIZES.get(t or "")
    if size is None or size > 8:
        raise cx.unsupported(f"{ins.full_opcode} (element type .{t})")
    return t, size


def _checked_width(cx: FunctionLowering, ins: ir.Instruction, size: int) -> int:
    """The vector width of a load or store the emulator runs: up to .v4, and the 256-bit
    .v8 of 32-bit elements (sm_100's ld/st.global.v8, in PyTorch's vectorized kernels),
    which it runs as two 128-bit halves. PTX's memory model lets it: a vector access is
    a set of scalar accesses to its elements, in no particular order."""
    width = ins.vector_width
    if width == 8 and size != 4:
        raise cx.unsupported(ins.full_opcode)
    return width


@MEMORY.lowers("ld", "ldu")
def lower_ld(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t, size = _element(cx, ins)
    width = _checked_width(cx, ins, size)
    dest, addr = ins.operands[0], ins.operands[1]
    space, base, offset = cx.address(addr, ins.state_space)
    elements = dest.elements if isinstance(dest, ir.Vector) else (dest,)
    if len(elements) != width:
        raise cx.unsupported(f"{ins.full_opcode} with {len(elements)} destinations")
    dests = [cx.dst(e) for e in elements]
    flags = _order_flags(ins) | (FLAGS["SIGN_EXTEND"] if t in SIGNED_TYPES else 0)
    for first in range(0, width, 4):           # a 256-bit .v8 as two 128-bit halves
        part = dests[first:first + 4]
        cx.emit(f"ld.{space}", part + [NO_SLOT] * (4 - len(part)) + [base], imm=offset + first * size,
                flags=flags, width=len(part), size=size)


@MEMORY.lowers("st")
def lower_st(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t, size = _element(cx, ins)
    width = _checked_width(cx, ins, size)
    addr, value = ins.operands[0], ins.operands[1]
    space, base, offset = cx.address(addr, ins.state_space)
    elements = value.elements if isinstance(value, ir.Vector) else (value,)
    if len(elements) != width:
        raise cx.unsupported(f"{ins.full_opcode} with {len(elements)} values")
    sources = [cx.src(e, t) for e in elements]
    for first in range(0, width, 4):           # a 256-bit .v8 as two 128-bit halves
        part = sources[first:first + 4]
        cx.emit(f"st.{space}", part + [NO_SLOT] * (4 - len(part)) + [base], imm=offset + first * size,
                flags=_order_flags(ins), width=len(part), size=size)


ATOM_TYPE_CODES = {"b16": "u16", "u16": "u16", "b32": "u32", "u32": "u32", "s32": "s32", "b64": "u64",
                   "u64": "u64", "s64": "s64", "f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16"}


@MEMORY.lowers("atom", "red")
def lower_atom(cx: FunctionLowering, ins: ir.Instruction) -> None:
    op = ins.atomic_operation
    t = ins.type
    if op is None or t not in ATOM_TYPE_CODES or ins.vector_width > 1:
        raise cx.unsupported(f"the atomic form {ins.full_opcode}")
    flags = FLAGS["ATOM"][op] << FLAGS["ATOM_SHIFT"]
    flags |= core.TYPE_CODES[ATOM_TYPE_CODES[t]] << FLAGS["SRC_TYPE_SHIFT"]
    operands = list(ins.operands)
    d = NO_SLOT
    if ins.opcode == "atom":
        d = cx.dst(operands.pop(0))
    addr = operands.pop(0)
    space = normalize_space(ins.state_space)
    if space not in ("global", "shared", "generic"):
        raise cx.unsupported(f"atomics on .{space}")
    key_space, base, offset = cx.address(addr, ins.state_space)
    if key_space not in ("global", "shared", "generic"):
        raise cx.unsupported(f"atomics on a .{key_space} symbol")
    b = cx.src(operands[0], t)
    c = cx.src(operands[1], t) if len(operands) > 1 else NO_SLOT
    if op == "cas" and c == NO_SLOT:
        raise cx.unsupported("atom.cas without a new value")
    cx.emit(f"atom.{key_space}", [d, b, c, NO_SLOT, base], imm=offset, flags=flags,
            size=TYPE_SIZES[t])


@MEMORY.lowers("cvta")
def lower_cvta(cx: FunctionLowering, ins: ir.Instruction) -> None:
    d, a = ins.operands
    to = ins.has("to")
    space = normalize_space(ins.state_space)
    if space == "generic":
        raise cx.unsupported(ins.full_opcode)
    if space == "global":  # global addresses are generic addresses
        cx.emit("mov", [cx.dst(d), cx.src(a)])
        return
    if isinstance(a, ir.Symbol) and not to:  # address of a variable, straight to generic
        cx.emit("mov", [cx.dst(d), cx.symbol_value(a.name, generic=True)])
        return
    if space not in ("shared", "local", "param"):
        raise cx.unsupported(ins.full_opcode)
    cx.emit(f"cvta.{'to.' if to else ''}{space}", [cx.dst(d), cx.src(a)])


@MEMORY.lowers("isspacep")
def lower_isspacep(cx: FunctionLowering, ins: ir.Instruction) -> None:
    space = normalize_space(ins.state_space)
    if space not in ("global", "shared", "local", "param"):
        raise cx.unsupported(ins.full_opcode)
    d, a = ins.operands
    cx.emit(f"isspacep.{space}", [cx.dst(d), cx.src(a)])


@MEMORY.lowers("mapa", "getctarank")
def lower_cluster_address(cx: FunctionLowering, ins: ir.Instruction) -> None:
    """mapa{.shared::cluster} d, a, rank and getctarank{.shared::cluster} d, a: addresses of
    distributed shared memory (csrc/src/emulator/cluster_memory.cpp)."""
    space = normalize_space(ins.state_space)
    if space not in ("shared", "generic") or len(ins.operands) != (3 if ins.opcode == "mapa" else 2):
        raise cx.unsupported(ins.full_opcode)
    d, a, *rank = ins.operands
    if isinstance(a, ir.Symbol) and space == "generic":
        address = cx.symbol_value(a.name, generic=True)
    else:
        address = cx.src(a, ins.type or "u64")
    sources = [address] + [cx.src(r, "u32") for r in rank]
    cx.emit(f"{ins.opcode}.{space}", [cx.dst(d)] + sources)


@MEMORY.lowers("membar", "fence")
def lower_fence(cx: FunctionLowering, ins: ir.Instruction) -> None:
    # The interpreter's memory is sequentially consistent between its threads
    # once fenced; proxy fences order nothing we model.
    cx.emit("nop" if ins.has("proxy") else "fence", [])


@MEMORY.lowers("prefetch", "prefetchu", "applypriority", "discard", "pmevent", "brkpt",
        "griddepcontrol", "createpolicy", "setmaxnreg")
def lower_hint(cx: FunctionLowering, ins: ir.Instruction) -> None:
    # setmaxnreg moves registers between a CTA's warpgroups; the emulator gives every
    # thread all the registers its code names, so there is nothing to move.
    if ins.opcode == "createpolicy":
        cx.emit("mov", [cx.dst(ins.operands[0]), cx.const(0)])
        return
    cx.emit("nop", [])


TENSOR_MAP_FIELDS = ("global_address", "rank", "box_dim", "global_dim", "global_stride", "element_stride",
                     "elemtype", "interleave_layout", "swizzle_mode", "swizzle_atomicity", "fill_mode")


@MEMORY.lowers("tensormap")
def lower_tensormap(cx: FunctionLowering, ins: ir.Instruction) -> None:
    """tensormap.replace.tile.<field>{.space}.b1024.<type> [map], {ordinal,} value: a
    store of the value into the field, where the emulator's tensor-map layout
    (csrc/src/emulator/tensor_map.h) keeps it."""
    field = next((f for f in TENSOR_MAP_FIELDS if ins.has(f)), None)
    if not ins.has("replace") or not ins.has("tile") or field is None:
        raise cx.unsupported(ins.full_opcode)
    ops = list(ins.operands)
    ordinal = 0
    if len(ops) == 3:
        if not isinstance(ops[1], ir.Immediate):
            raise cx.unsupported(f"{ins.full_opcode} with an ordinal that is not a literal")
        ordinal = int(ops[1].value)
        del ops[1]
    if len(ops) != 2:
        raise cx.unsupported(f"{ins.full_opcode} with {len(ins.operands)} operands")
    placed = core.tensor_map_field(field, ordinal)
    if placed is None:
        raise cx.unsupported(f"{ins.full_opcode} of dimension {ordinal} (a tensor map has "
                             f"{core.TENSOR_MAP_MAX_RANK} at most)")
    offset, size = placed
    space, base, address_offset = cx.address(ops[0], ins.state_space)
    cx.emit(f"st.{space}", [cx.src(ops[1], ins.type or "b64")] + [NO_SLOT] * 3 + [base],
            imm=address_offset + offset, width=1, size=size)
