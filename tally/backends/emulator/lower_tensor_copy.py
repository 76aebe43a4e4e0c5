"""Lowering of TMA tensor copies (csrc/src/emulator/ops_tensor_copy.cpp runs them):

    cp.async.bulk.tensor.<n>d.shared::cluster.global{.tile}.mbarrier::complete_tx::bytes
        {.multicast::cluster}{.L2::cache_hint} [dst], [map, {c0, ...}], [mbar]{, ctaMask}{, policy}
    cp.async.bulk.tensor.<n>d.global.shared::cta{.tile}.bulk_group{.L2::cache_hint} [map, {c0, ...}], [src]{, policy}
    cp.reduce.async.bulk.tensor.<n>d.global.shared::cta.<op>{.tile}.bulk_group{.L2::cache_hint} [map, {c...}], [src]
        (op: add, min, max, inc, dec, and, or, xor; the element type is the map's)
    cp.async.bulk.prefetch.tensor...: no effect

The map operand is the tensor map's generic address (a __grid_constant__
parameter's, or global memory's). im2col mode is refused with the instruction named.
"""
from __future__ import annotations

from ptx_passes import ir
from tally.backends.emulator.context import FLAGS, NO_SLOT, FunctionLowering

# The reductions of cp.reduce.async.bulk{.tensor} (atom's operations).
REDUCE_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")

MULTICAST = 1


def _rank(cx: FunctionLowering, ins: ir.Instruction) -> int:
    for m in ins.modifiers:
        if len(m) == 2 and m[1] == "d" and m[0] in "12345":
            return int(m[0])
    raise cx.unsupported(f"{ins.full_opcode} without a dimension (.1d-.5d)")


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
    # The load mode is .tile unless the instruction names another (CUTLASS leaves it out).
    other_modes = [q for q in ins.modifiers if q.startswith(("im2col", "tile::"))]
    if other_modes:
        raise cx.unsupported(f"{ins.full_opcode} (the emulator copies tensors in tile mode)")
    rank = _rank(cx, ins)
    ops = list(ins.operands)
    if ins.has("L2::cache_hint"):
        ops = ops[:-1]
    if ins.has("reduce"):      # shared -> global, combined into the tensor's elements
        op = next((o for o in REDUCE_OPS if ins.has(o)), None)
        if op is None or not ins.has("bulk_group"):
            raise cx.unsupported(f"the tensor reduction {ins.full_opcode}")
        map_slot, coordinates = _map_and_coordinates(cx, ops[0], rank)
        src = cx.address_slot(ops[1], "shared::cta")
        cx.emit("cp.reduce.async.bulk.tensor.global.shared", [map_slot, src, NO_SLOT] + coordinates,
                flags=FLAGS["ATOM"][op] << FLAGS["ATOM_SHIFT"], size=rank)
        return
    if ins.has("bulk_group"):   # shared -> global
        map_slot, coordinates = _map_and_coordinates(cx, ops[0], rank)
        src = cx.address_slot(ops[1], "shared::cta")
        cx.emit("cp.async.bulk.tensor.global.shared", [map_slot, src, NO_SLOT] + coordinates, size=rank)
        return
    if not ins.has("mbarrier::complete_tx::bytes") or len(ops) < 3:
        raise cx.unsupported(ins.full_opcode)
    dst = cx.address_slot(ops[0], "shared::cluster")
    map_slot, coordinates = _map_and_coordinates(cx, ops[1], rank)
    bar = cx.address_slot(ops[2], "shared::cluster")
    flags = 0
    if ins.has("multicast::cluster"):
        if len(ops) < 4:
            raise cx.unsupported(f"{ins.full_opcode} without its CTA mask")
        # The barrier's 32-bit address and the mask share one operand.
        mask = cx.temp()
        cx.emit("and.b64", [mask, cx.src(ops[3], "u16"), cx.const(0xFFFF)])
        cx.emit("shl.b64", [mask, mask, cx.const(32)])
        low = cx.temp()
        cx.emit("and.b64", [low, bar, cx.const(0xFFFF_FFFF)])
        cx.emit("or.b64", [mask, mask, low])
        bar, flags = mask, MULTICAST
    cx.emit("cp.async.bulk.tensor.shared.global", [dst, map_slot, bar] + coordinates, flags=flags, size=rank)
