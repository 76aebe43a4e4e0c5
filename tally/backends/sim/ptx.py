"""Just enough PTX reading for the `sim` backend to load a real module: entry
names with their parameter layouts, and module-scope globals with their sizes.

The sim executes nothing, so it needs no instructions. Layout rule (the one
DESIGN.md "Kernel parameter layout" measured): parameters are packed in order,
each at the next multiple of its alignment (`.align N` when given, else its
element size).
"""
from __future__ import annotations

import re

from tally.backends.base import KernelParam

_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([a-z]\d+|pred)\s+[\w$.]+(?:\s*\[(\d+)\])?")
_GLOBAL = re.compile(r"\.global\s+(?:\.align\s+(\d+)\s+)?\.([a-z]\d+)\s+([\w$.]+)(?:\s*\[(\d+)\])?")


def _element_size(ptx_type: str) -> int:
    if ptx_type == "pred":
        return 1
    return max(1, int(ptx_type[1:]) // 8)


def entry_params(ptx: str) -> dict[str, tuple[KernelParam, ...]]:
    """Every `.entry` in the module and its parameters' offsets and sizes."""
    entries: dict[str, tuple[KernelParam, ...]] = {}
    for match in _ENTRY.finditer(ptx):
        name, body = match.group(1), match.group(2)
        params, offset = [], 0
        for p in _PARAM.finditer(body):
            elem = _element_size(p.group(2))
            count = int(p.group(3)) if p.group(3) else 1
            align = int(p.group(1)) if p.group(1) else elem
            offset = -(-offset // align) * align
            params.append(KernelParam(offset=offset, size=elem * count, align=align))
            offset += elem * count
        entries[name] = tuple(params)
    return entries


def global_sizes(ptx: str) -> dict[str, int]:
    """Module-scope `.global` variables and their sizes in bytes."""
    out = {}
    for m in _GLOBAL.finditer(ptx):
        out[m.group(3)] = _element_size(m.group(2)) * (int(m.group(4)) if m.group(4) else 1)
    return out
