"""Lowering of texture fetches and surface accesses (csrc/src/emulator/ops_texture.cpp
runs them, reading tally's texture descriptors, csrc/src/emulator/texture.h):

    tex{.level,.grad,.base}.{1d,2d,3d,a1d,a2d,cube}.v4.{f32,s32,u32}.{f32,s32} d, [t, c]{, lod/gradients}
    tld4.{r,g,b,a}.2d.v4.{f32,s32,u32}.f32 d, [t, c]
    suld.b.{1d,2d,3d,a1d,a2d}{.v2,.v4}.{b8,b16,b32,b64}.{trap,clamp,zero} d, [s, c]
    sust.b.{1d,2d,3d,a1d,a2d}{.v2,.v4}.{b8,b16,b32,b64}.{trap,clamp,zero} [s, c], v

The handle `t`/`s` is a register or a kernel parameter holding a CUtexObject /
CUsurfObject (bindless: unified texture mode). tally refuses mipmapped textures, so a
level of detail or gradient has nothing to choose from and is ignored, as a GPU does
for a texture without mip levels. Module-scope .texref/.surfref/.samplerref
variables, independent texture mode, multisample, cube-array geometries, formatted
surface stores (sust.p), surface reductions and queries (txq, suq) are refused with
the instruction named.
"""
from __future__ import annotations

from ptx_passes import ir
from tally.backends.emulator.context import NO_SLOT, FunctionLowering, Lowerers

TEXTURE = Lowerers()

# The instruction geometry -> the resource shape it reads (texture.h's TextureShape).
GEOMETRIES = {"1d": 1, "2d": 2, "3d": 3, "a1d": 4, "a2d": 5, "cube": 6}
# Coordinates each geometry uses (PTX pads 3-D and cube vectors to four; the layer
# of a1d/a2d comes first).
COORDINATES = {"1d": 1, "2d": 2, "3d": 3, "a1d": 2, "a2d": 3, "cube": 3}
INTEGER_COORDINATES = 1
OUT_OF_BOUNDS = {"trap": 0, "clamp": 1, "zero": 2}
SURFACE_TYPES = {"b8": 1, "b16": 2, "b32": 4, "b64": 8}
GATHER_COMPONENTS = {"r": 0, "g": 1, "b": 2, "a": 3}


def _geometry(cx: FunctionLowering, ins: ir.Instruction) -> str:
    found = [m for m in ins.modifiers if m in GEOMETRIES]
    if not found:
        raise cx.unsupported(f"{ins.full_opcode} (the emulator samples 1d, 2d, 3d, a1d, a2d and cube textures)")
    return found[0]


def _handle(cx: FunctionLowering, base: ir.Operand | None) -> int:
    """Slot holding the texture or surface object."""
    if isinstance(base, ir.Register):
        return cx.reg(base)
    if isinstance(base, ir.Symbol) and cx.lookup(base.name).kind == "param":
        space, zero, offset = cx.address(ir.Address(base=base), "param")
        slot = cx.temp()
        cx.emit(f"ld.{space}", [slot, NO_SLOT, NO_SLOT, NO_SLOT, zero], imm=offset, width=1, size=8)
        return slot
    raise cx.unsupported(f"the texture or surface operand {base} (tally runs bindless texture and surface objects; "
                         f".texref, .surfref and .samplerref variables are not supported)")


def _place(cx: FunctionLowering, op: ir.Operand, geometry: str, coordinate_type: str) -> tuple[int, list[int]]:
    if not isinstance(op, ir.Address) or op.coordinates is None or op.offset:
        raise cx.unsupported(f"the texture operand {op}")
    elements = op.coordinates.elements if isinstance(op.coordinates, ir.Vector) else (op.coordinates,)
    wanted = COORDINATES[geometry]
    if len(elements) < wanted:
        raise cx.unsupported(f"{len(elements)} coordinates for a .{geometry} access")
    layered = geometry in ("a1d", "a2d")
    slots = [cx.src(e, "s32" if layered and i == 0 else coordinate_type) for i, e in enumerate(elements[:wanted])]
    return _handle(cx, op.base), slots


def _destinations(cx: FunctionLowering, ins: ir.Instruction, op: ir.Operand, count: int) -> list[int]:
    elements = op.elements if isinstance(op, ir.Vector) else (op,)
    if len(elements) != count:
        raise cx.unsupported(f"{ins.full_opcode} with {len(elements)} destinations")
    return [cx.dst(e) for e in elements]


def _fetch(cx: FunctionLowering, ins: ir.Instruction, key: str, imm2: int = 0) -> None:
    if len(ins.operands) < 2 or isinstance(ins.operands[0], ir.Address):
        raise cx.unsupported(ins.full_opcode)
    types = ins.types
    if not ins.has("v4") or len(types) != 2 or types[0] not in ("f32", "s32", "u32") or types[1] not in ("f32", "s32"):
        raise cx.unsupported(f"{ins.full_opcode} (the emulator fetches .v4 of .f32/.s32/.u32 by .f32/.s32 "
                             f"coordinates)")
    geometry = "2d" if key == "tld4" else _geometry(cx, ins)
    dests = _destinations(cx, ins, ins.operands[0], 4)
    handle, coordinates = _place(cx, ins.operands[1], geometry, types[1])
    flags = INTEGER_COORDINATES if types[1] == "s32" else 0
    cx.emit(key, dests + [handle] + coordinates, imm=GEOMETRIES[geometry], imm2=imm2, flags=flags)


@TEXTURE.lowers("tex")
def lower_tex(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if any(m in ins.modifiers for m in ("2dms", "a2dms", "acube")):
        raise cx.unsupported(f"{ins.full_opcode} (multisample and cube-array textures are not emulated)")
    _fetch(cx, ins, "tex")


@TEXTURE.lowers("tld4")
def lower_tld4(cx: FunctionLowering, ins: ir.Instruction) -> None:
    component = next((GATHER_COMPONENTS[m] for m in ins.modifiers if m in GATHER_COMPONENTS), None)
    if component is None or not ins.has("2d"):
        raise cx.unsupported(f"{ins.full_opcode} (the emulator gathers from 2d textures)")
    _fetch(cx, ins, "tld4", imm2=component)


def _surface(cx: FunctionLowering, ins: ir.Instruction) -> tuple[str, int, int, int]:
    """(geometry, element bytes, vector width, out-of-bounds mode) of suld.b / sust.b."""
    if not ins.has("b"):
        raise cx.unsupported(f"{ins.full_opcode} (formatted surface accesses are not emulated; .b ones are)")
    geometry = _geometry(cx, ins)
    if geometry == "cube":
        raise cx.unsupported(f"{ins.full_opcode} (cubemap surfaces are not emulated)")
    size = next((SURFACE_TYPES[m] for m in ins.modifiers if m in SURFACE_TYPES), None)
    if size is None:
        raise cx.unsupported(f"{ins.full_opcode} (element type)")
    mode = next((OUT_OF_BOUNDS[m] for m in ins.modifiers if m in OUT_OF_BOUNDS), OUT_OF_BOUNDS["trap"])
    return geometry, size, ins.vector_width, mode


@TEXTURE.lowers("suld")
def lower_suld(cx: FunctionLowering, ins: ir.Instruction) -> None:
    geometry, size, width, mode = _surface(cx, ins)
    dests = _destinations(cx, ins, ins.operands[0], width)
    handle, coordinates = _place(cx, ins.operands[1], geometry, "s32")
    cx.emit("suld", dests + [NO_SLOT] * (4 - width) + [handle] + coordinates, imm=GEOMETRIES[geometry],
            flags=mode, width=width, size=size)


@TEXTURE.lowers("sust")
def lower_sust(cx: FunctionLowering, ins: ir.Instruction) -> None:
    geometry, size, width, mode = _surface(cx, ins)
    handle, coordinates = _place(cx, ins.operands[0], geometry, "s32")
    value = ins.operands[1]
    elements = value.elements if isinstance(value, ir.Vector) else (value,)
    if len(elements) != width:
        raise cx.unsupported(f"{ins.full_opcode} with {len(elements)} values")
    type_name = next(m for m in ins.modifiers if m in SURFACE_TYPES)
    sources = [cx.src(e, type_name) for e in elements]
    cx.emit("sust", sources + [NO_SLOT] * (4 - width) + [handle] + coordinates, imm=GEOMETRIES[geometry],
            flags=mode, width=width, size=size)
