"""Kernel parameter layout from a PTX `.entry` signature.

The driver copies a launch's parameters into one buffer, each parameter at the
next offset that is a multiple of its alignment ("natural packing"); the
buffer's size is the end of the last parameter, with no tail padding. A
parameter's alignment is its `.align N` when given (structs and arrays:
`.param .align 8 .b8 p[24]`), else the size of its type (times the vector
width); `.ptr .align N` describes the pointee and does not change the layout.
This agrees with cubin EIATTR_KPARAM_INFO and cuFuncGetParamInfo (DESIGN.md,
"Kernel parameter layout").
"""
from __future__ import annotations

from math import prod
from typing import NamedTuple

from .ir import TYPE_SIZES, Function, Param


class ParamSlot(NamedTuple):
    offset: int
    size: int
    align: int


def param_size_align(param: Param) -> tuple[int, int]:
    """(size, alignment) of one parameter in the parameter buffer."""
    element = TYPE_SIZES.get(param.type)
    if element is None:
        raise ValueError(f"parameter {param.name} has type .{param.type}, which has no size in a "
                         "parameter buffer (use .b8/.u32/... types)")
    if any(d is None for d in param.array_dims):
        raise ValueError(f"parameter {param.name} is an unsized array; kernel parameters need a size")
    element *= param.vector or 1
    size = element * prod(param.array_dims)
    align = param.align if param.align is not None else element
    if align <= 0 or align & (align - 1):
        raise ValueError(f"parameter {param.name} has alignment {align}, which is not a power of two")
    return size, align


def param_layout(entry: Function) -> list[ParamSlot]:
    """(offset, size, align) of each parameter of a kernel, in declaration order."""
    slots = []
    end = 0
    for p in entry.params:
        size, align = param_size_align(p)
        offset = (end + align - 1) // align * align
        slots.append(ParamSlot(offset, size, align))
        end = offset + size
    return slots


def param_bytes(entry: Function) -> int:
    """Size of the kernel's parameter buffer: the end of its last parameter (0 without any)."""
    slots = param_layout(entry)
    return slots[-1].offset + slots[-1].size if slots else 0
