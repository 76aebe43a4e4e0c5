"""Where a kernel's data lives: variable sizes, the static shared-memory layout
of a kernel and the functions it calls, call-frame layouts, and the bytes of
module-scope initializers.

Offsets are byte offsets in their state space: shared offsets in the block's
shared memory, frame offsets in the thread's local memory of one call frame
(function parameters, return values, call arguments and `.local` arrays all
live there), kernel parameter offsets in the launch's parameter buffer.
"""
from __future__ import annotations

import math
import struct
from collections import deque
from dataclasses import dataclass, field

from ptx_passes import ir
from ptx_passes.ir import TYPE_SIZES

DYNAMIC_SHARED_ALIGN = 16


class LayoutError(Exception):
    """A declaration the emulator cannot place (unsized, unknown type)."""


def element_size(type_name: str) -> int:
    if type_name == "pred":
        return 1
    size = TYPE_SIZES.get(type_name)
    if size is None:
        raise LayoutError(f"variables of type .{type_name} are not supported by the emulator")
    return size


def var_size(decl: ir.VarDecl | ir.Param) -> int:
    """Bytes of a variable; an unsized array with an initializer takes the initializer's length."""
    element = element_size(decl.type) * (decl.vector or 1)
    dims = list(decl.array_dims)
    if any(d is None for d in dims):
        init = getattr(decl, "init", None)
        if init is None:
            raise LayoutError(f"{decl.name} is an unsized array without an initializer")
        dims = [len(_flatten(init))] if len(dims) == 1 else dims
        if any(d is None for d in dims):
            raise LayoutError(f"cannot size the multi-dimensional unsized array {decl.name}")
    return element * math.prod(dims)


def var_align(decl: ir.VarDecl | ir.Param) -> int:
    if decl.align:
        return decl.align
    return element_size(decl.type) * (decl.vector or 1)


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def is_extern_shared(decl: ir.VarDecl) -> bool:
    return decl.space.startswith("shared") and any(d is None for d in decl.array_dims)


# --------------------------------------------------------------------------- call graph


def function_indices(module: ir.Module) -> dict[str, int]:
    """Index of each function of the module: function pointers are CODE_WINDOW + index,
    so a pointer stored in memory means the same function in every kernel."""
    out: dict[str, int] = {}
    for f in module.functions():
        out.setdefault(f.name, len(out))
    return out


def initializer_symbols(module: ir.Module) -> set[str]:
    names: set[str] = set()
    for g in module.globals():
        if g.init is not None:
            names.update(i.name for i in _flatten(g.init) if isinstance(i, ir.SymbolAddress))
    return names


def reachable_functions(module: ir.Module, entry: ir.Function) -> list[ir.Function]:
    """The entry and every function it may call directly, whose address it takes
    (`mov.u64 %fn, f`) or whose address a module variable holds (function pointer
    tables), in discovery order."""
    names = {f.name for f in module.functions()}
    seen = {entry.name}
    order = [entry]
    queue = deque([entry])
    for name in sorted(initializer_symbols(module) & names):
        if name not in seen:
            seen.add(name)
            order.append(module.function(name))
            queue.append(order[-1])
    while queue:
        fn = queue.popleft()
        for name in sorted(symbols_used(fn) & names, key=str):
            if name in seen:
                continue
            seen.add(name)
            callee = module.function(name)
            order.append(callee)
            queue.append(callee)
    return order


def symbols_used(fn: ir.Function) -> set[str]:
    names: set[str] = set()

    def visit(op) -> None:
        if isinstance(op, ir.Symbol):
            names.add(op.name)
        elif isinstance(op, ir.Address):
            if isinstance(op.base, ir.Symbol):
                names.add(op.base.name)
        elif isinstance(op, (ir.Vector, ir.ParenList)):
            for e in (op.elements if isinstance(op, ir.Vector) else op.items):
                visit(e)

    if fn.body is not None:
        for ins in fn.body.instructions():
            for op in ins.operands:
                visit(op)
    return names


# --------------------------------------------------------------------------- shared memory


@dataclass
class SharedLayout:
    """Static shared variables of one kernel (by declaration identity) and where
    dynamic (`extern .shared`) memory starts."""

    offsets: dict[int, int] = field(default_factory=dict)   # id(VarDecl) -> offset
    static_bytes: int = 0
    dynamic_offset: int = 0


def shared_layout(module: ir.Module, functions: list[ir.Function]) -> SharedLayout:
    layout = SharedLayout()
    used: set[str] = set()
    decls: list[ir.VarDecl] = []
    for fn in functions:
        used |= symbols_used(fn)
        if fn.body is not None:
            for _block, _i, s in ir.iter_statements(fn.body):
                if isinstance(s, ir.VarDecl) and s.space.startswith("shared"):
                    decls.append(s)
    for g in module.globals():
        if g.space.startswith("shared") and g.name in used:
            decls.append(g)
    end = 0
    extern_align = DYNAMIC_SHARED_ALIGN
    for d in decls:
        if is_extern_shared(d):
            extern_align = max(extern_align, var_align(d))
            continue
        offset = align_up(end, var_align(d))
        layout.offsets[id(d)] = offset
        end = offset + var_size(d)
    layout.static_bytes = end
    layout.dynamic_offset = align_up(end, extern_align)
    for d in decls:
        if is_extern_shared(d):
            layout.offsets[id(d)] = layout.dynamic_offset
    return layout


# --------------------------------------------------------------------------- call frames


@dataclass
class FrameLayout:
    """Offsets of a function's frame variables; params and return values first,
    so callers know them before the callee's body is lowered."""

    offsets: dict[int, int] = field(default_factory=dict)   # id(Param or VarDecl) -> offset
    size: int = 0

    def place(self, decl: ir.Param | ir.VarDecl) -> int:
        offset = align_up(self.size, var_align(decl))
        self.offsets[id(decl)] = offset
        self.size = offset + var_size(decl)
        return offset


def function_frame(fn: ir.Function) -> FrameLayout:
    frame = FrameLayout()
    if not fn.is_entry:
        for p in fn.params:
            frame.place(p)
        for p in fn.return_params or ():
            frame.place(p)
    return frame


# --------------------------------------------------------------------------- initializers


def _flatten(init: ir.Initializer) -> list[ir.Initializer]:
    if isinstance(init, ir.InitList):
        out: list[ir.Initializer] = []
        for item in init.items:
            out.extend(_flatten(item))
        return out
    return [init]


def encode_scalar(value: float, type_name: str, text: str = "") -> bytes:
    """Little-endian bytes of one value of a PTX type (floats from their 0f/0d bits when written so)."""
    size = element_size(type_name)
    if type_name in ("f32", "f64", "f16", "bf16"):
        bits = float_bits(value, text, type_name)
        return bits.to_bytes(size, "little")
    if isinstance(value, float):
        value = int(value)
    return (int(value) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def float_bits(value: float, text: str, type_name: str) -> int:
    """The bit pattern of an immediate as a float of `type_name`."""
    t = text.lower()
    negative = t.startswith("-")
    digits = t.lstrip("-+")
    if digits.startswith("0f") and len(digits) == 10:
        bits32 = int(digits[2:], 16) ^ (0x8000_0000 if negative else 0)
        if type_name == "f32":
            return bits32
        value = struct.unpack("<f", struct.pack("<I", bits32))[0]
    elif digits.startswith("0d") and len(digits) == 18:
        bits64 = int(digits[2:], 16) ^ (0x8000_0000_0000_0000 if negative else 0)
        if type_name == "f64":
            return bits64
        value = struct.unpack("<d", struct.pack("<Q", bits64))[0]
    value = float(value)
    if type_name == "f64":
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    if type_name == "f32":
        try:
            return struct.unpack("<I", struct.pack("<f", value))[0]
        except OverflowError:
            return 0x7F800000 if value > 0 else 0xFF800000
    if type_name == "f16":
        try:
            return struct.unpack("<H", struct.pack("<e", value))[0]
        except OverflowError:
            return 0x7C00 if value > 0 else 0xFC00
    f32 = struct.unpack("<I", struct.pack("<f", value))[0]   # bf16: round f32 bits to nearest even
    return ((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16) & 0xFFFF


def encode_initializer(decl: ir.VarDecl, address_of) -> bytes:
    """Bytes of a module variable with its initializer; `address_of(name)` gives the
    device address of another variable (for `sym`, `generic(sym)+4` entries)."""
    size = var_size(decl)
    out = bytearray(size)
    if decl.init is None:
        return bytes(out)
    element = element_size(decl.type)
    offset = 0
    for item in _flatten(decl.init):
        if offset + element > size:
            raise LayoutError(f"the initializer of {decl.name} has more values than the variable holds")
        if isinstance(item, ir.SymbolAddress):
            value = address_of(item.name) + item.offset
            out[offset:offset + element] = encode_scalar(value, decl.type if not decl.type.startswith("f") else "u64")
        else:
            out[offset:offset + element] = encode_scalar(item.value, decl.type, item.text)
        offset += element
    return bytes(out)
