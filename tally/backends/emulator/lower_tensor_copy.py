"""Lowering of TMA tensor copies (csrc/src/emulator/ops_tensor_copy.cpp runs them):

    cp.async.bulk.tensor.<n>d.shared::cluster.global{.tile}.mbarrier::complete_tx::bytes
        {.multicast::cluster}{.L2::cache_hint} [dst], [map, {c0, ...}], [mbar]{, ctaMask}{, policy}
    cp.async.bulk.tensor.<n>d.global.shared::cta{.tile}.bulk_group{.L2::cache_hint} [map, {c0, ...}], [src]{, policy}
    cp.reduce.async.bulk.tensor.<n>d.global.shared::cta.<op>{.tile}.bulk_group{.L2::cache_hint} [map, {c...}], [src]
        (op: add, min, max, inc, dec, and, or, xor; the element type is the map's)
    cp.async.bulk.prefetch.tensor...: no effect
    the load mode .im2col on loads ([dst], [map, {c...}], [mbar], {o...}: one 16-bit
        offset per spatial dimension), .im2col_no_offs on stores and reductions

The map operand is the tensor map's generic address (a __grid_constant__
parameter's, or global memory's). The load modes of compute capability 10.0
(.im2col::w, .im2col::w::128, .tile::gather4, .tile::scatter4) are refused with the
instruction named. An im2col copy packs its coordinates two to a slot and its offsets
into the slot after them (the handler's header says why).
"""
from __future__ import annotations

from ptx_passes import ir
from tally.backends.emulator.context import FLAGS, NO_SLOT, FunctionLowering

# The reductions of cp.reduce.async.bulk{.tensor} (atom's operations).
REDUCE_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")

MULTICAST, IM2COL = 1, 2          # the handlers' flags (ops_tensor_copy.cpp)


def _rank(cx: FunctionLowering, ins: ir.Instruction) -> int:
    for m in ins.modifiers:
        if len(m) == 2 and m[1] == "d" and m[0] in "12345":
            return int(m[0])
    raise cx.unsupported(f"{ins.full_opcode} without a dimension (.1d-.5d)")


def _load_mode(cx: FunctionLowering, ins: ir.Instruction, loading: bool) -> int:
    """The copy's mode flag (0: tile, IM2COL); the mode is .tile unless the instruction
    names another (CUTLASS leaves it out)."""
    named = [q for q in ins.modifiers if q.startswith(("im2col", "tile"))]
    if not named:
        return 0
    mode = named[0]
    if mode == "tile":
        return 0
    if mode == ("im2col" if loading else "im2col_no_offs"):
        return IM2COL
    raise cx.unsupported(f"{ins.full_opcode} (the emulator copies tensors in tile mode, loads in .im2col mode and "
                         f"stores and reductions in .im2col_no_offs mode)")


def _packed(cx: FunctionLowering, slots: list[int], bits: int) -> int:
    """One slot holding `slots`' values, `bits` each, the first lowest."""
    packed = cx.temp()
    cx.emit("and.b64", [packed, slots[-1], cx.const((1 << bits) - 1)])
    for slot in reversed(slots[:-1]):
        part = cx.temp()
        cx.emit("and.b64", [part, slot, cx.const((1 << bits) - 1)])
        cx.emit("shl.b64", [packed, packed, cx.const(bits)])
        cx.emit("or.b64", [packed, packed, part])
    return packed


def _im2col_operands(cx: FunctionLowering, coordinates: list[int], offsets: ir.Operand | None) -> list[int]:
    """Coordinates two to a slot, then the im2col offsets (zeros without them) in one."""
    slots = [_packed(cx, coordinates[i:i + 2], 32) for i in range(0, len(coordinates), 2)]
    if offsets is None:
        return slots + [cx.const(0)]
    elements = offsets.elements if isinstance(offsets, ir.Vector) else (offsets,)
    if len(elements) != len(coordinates) - 2:
        raise cx.unsupported(f"{len(elements)} im2col offsets for a {len(coordinates)}-D copy")
    return slots + [_packed(cx, [cx.src(o, "u16") for o in elements], 16)]


def _map_and_coordinates(cx: FunctionLowering, op: ir.Operand, rank: int) -> tuple[int, list[int]]:
    if not isinstance(op, ir.Address) or op.coordinates is None:
        raise cx.unsupported(f"the tensor operand {op}")
    coordinates = op.coordinates.elements if isinstance(op.coordinates, ir.Vector) else (op.coordinates,)
    if len(coordinates) != rank:
        raise cx.unsupported(f"{len(coordinates)} coordinates for a {rank}-D copy")
    if isinstance(op.base, ir.Symbol) and cx.lookup(op.base.name).kind == "param":
        # A kernel parameter named directly (a __grid_constant__ map): its generic address.
        map_slot = cx.symbol_value(op.base.name, generic=True)
        if op.offset:
            slot = cx.temp()
            cx.emit("add.u64", [slot, map_slot, cx.const(op.offset)])
            map_slot = slot
    else:
        map_slot = cx.address_slot(ir.Address(base=op.base, offset=op.offset), None)
    return map_slot, [cx.src(c, "s32") for c in coordinates]


def lower_tensor_copy(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if ins.has("prefetch"):
        cx.emit("nop", [])
        return
    rank = _rank(cx, ins)
    ops = list(ins.operands)
    if ins.has("L2::cache_hint"):
        ops = ops[:-1]
    if ins.has("bulk_group"):   # shared -> global: a store, or a reduction into the tensor's elements
        opcode, flags = "cp.async.bulk.tensor.global.shared", 0
        if ins.has("reduce"):
            op = next((o for o in REDUCE_OPS if ins.has(o)), None)
            if op is None:
                raise cx.unsupported(f"the tensor reduction {ins.full_opcode}")
            opcode, flags = "cp.reduce.async.bulk.tensor.global.shared", FLAGS["ATOM"][op] << FLAGS["ATOM_SHIFT"]
        mode = _load_mode(cx, ins, loading=False)
        map_slot, coordinates = _map_and_coordinates(cx, ops[0], rank)
        src = cx.address_slot(ops[1], "shared::cta")
        if mode == IM2COL:
            coordinates = _im2col_operands(cx, coordinates, None)
        cx.emit(opcode, [map_slot, src, NO_SLOT] + coordinates, flags=flags | mode, size=rank)
        return
    if ins.has("reduce"):
        raise cx.unsupported(f"the tensor reduction {ins.full_opcode}")
    if not ins.has("mbarrier::complete_tx::bytes") or len(ops) < 3:
        raise cx.unsupported(ins.full_opcode)
    mode = _load_mode(cx, ins, loading=True)
    dst = cx.address_slot(ops[0], "shared::cluster")
    map_slot, coordinates = _map_and_coordinates(cx, ops[1], rank)
    bar = cx.address_slot(ops[2], "shared::cluster")
    ops = ops[3:]
    if mode == IM2COL:
        if not ops:
            raise cx.unsupported(f"{ins.full_opcode} without its im2col offsets")
        coordinates = _im2col_operands(cx, coordinates, ops[0])
        ops = ops[1:]
    flags = mode
    if ins.has("multicast::cluster"):
        if not ops:
            raise cx.unsupported(f"{ins.full_opcode} without its CTA mask")
        # The barrier's 32-bit address and the mask share one operand.
        mask = cx.temp()
        cx.emit("and.b64", [mask, cx.src(ops[0], "u16"), cx.const(0xFFFF)])
        cx.emit("shl.b64", [mask, mask, cx.const(32)])
        low = cx.temp()
        cx.emit("and.b64", [low, bar, cx.const(0xFFFF_FFFF)])
        cx.emit("or.b64", [mask, mask, low])
        bar, flags = mask, flags | MULTICAST
    cx.emit("cp.async.bulk.tensor.shared.global", [dst, map_slot, bar] + coordinates, flags=flags, size=rank)
