"""What a kernel needs, read from its PTX (what cuFuncGetAttribute answers on the
emulator): static shared memory as the emulator lays it out, its `.const` and
`.local` bytes, a register count, launch bounds and compile-time cluster shape.

Registers: PTX names unlimited virtual registers, and ptxas maps them onto at
most 255 physical ones per thread. The estimate is what a register allocator
that never spills needs: in the instruction order of each function, a register
is live from its first to its last mention (stretched to the end of a loop it is
live across), and the count is the most 32-bit registers live at once (64-bit
ones count two, predicates none: they have their own file), over the kernel and
every function it reaches, at least 1 and at most 255 or the kernel's `.maxnreg`
(which ptxas keeps to by spilling). It is meant to be plausible (the occupancy
calculator reads it), not what ptxas would pick.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ptx_passes import ir
from tally.backends.emulator.layout import reachable_functions, shared_layout, symbols_used, var_align, var_size

MAX_REGISTERS = 255
_REGISTER_WIDTH = {"8": 1, "16": 1, "32": 1, "64": 2, "128": 4}


@dataclass(frozen=True)
class KernelResources:
    static_shared_bytes: int
    const_bytes: int
    local_bytes: int
    registers: int
    max_threads: int | None                      # .maxntid / .reqntid (thread count), None: none
    ptx_version: int                             # the PTX's target architecture (sm_90a: 90)
    required_cluster: tuple[int, int, int] | None  # .reqnctapercluster
    explicit_cluster: bool                       # .explicitcluster


def kernel_resources(module: ir.Module, entry: ir.Function) -> KernelResources:
    functions = reachable_functions(module, entry)
    used: set[str] = set()
    for fn in functions:
        used |= symbols_used(fn)
    const_bytes = 0
    for g in module.globals():
        if g.space == "const" and g.name in used:
            const_bytes = _aligned(const_bytes, var_align(g)) + var_size(g)
    local_bytes = 0
    for fn in functions:
        if fn.body is None:
            continue
        for _block, _i, s in ir.iter_statements(fn.body):
            if isinstance(s, ir.VarDecl) and s.space == "local":
                local_bytes = _aligned(local_bytes, var_align(s)) + var_size(s)
    registers = max((_register_pressure(fn) for fn in functions if fn.body is not None), default=1)
    return KernelResources(
        static_shared_bytes=shared_layout(module, functions).static_bytes,
        const_bytes=const_bytes,
        local_bytes=local_bytes,
        registers=min(max(registers, 1), _register_cap(entry)),
        max_threads=_thread_bound(entry),
        ptx_version=_target_arch(module),
        required_cluster=_dims(entry, "reqnctapercluster"),
        explicit_cluster=entry.directive("explicitcluster") is not None,
    )


def _aligned(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _dims(fn: ir.Function, name: str) -> tuple[int, int, int] | None:
    d = fn.directive(name)
    if d is None:
        return None
    values = [int(a) for a in d.args] + [1, 1]
    return tuple(values[:3])


def _register_cap(fn: ir.Function) -> int:
    d = fn.directive("maxnreg")
    return min(int(d.args[0]), MAX_REGISTERS) if d is not None and d.args else MAX_REGISTERS


def _thread_bound(fn: ir.Function) -> int | None:
    bounds = [x * y * z for x, y, z in filter(None, (_dims(fn, "maxntid"), _dims(fn, "reqntid")))]
    return min(bounds) if bounds else None


def _target_arch(module: ir.Module) -> int:
    for t in module.targets:
        m = re.match(r"(?:sm|compute)_(\d+)", t)
        if m:
            return int(m.group(1))
    return 0


def _register_pressure(fn: ir.Function) -> int:
    """The most 32-bit registers live at once in `fn` (see the module's docstring)."""
    widths: dict[str, int] = {}
    for _block, _i, s in ir.iter_statements(fn.body):
        if isinstance(s, ir.RegDecl) and s.type != "pred":
            width = _REGISTER_WIDTH.get(re.sub(r"\D", "", s.type) or "32", 1) * (s.vector or 1)
            for name in s.names():
                widths[name] = width
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    labels: dict[str, int] = {}
    back_edges: list[tuple[int, int]] = []      # (loop head, branch position)
    position = 0
    for _block, _i, s in ir.iter_statements(fn.body):
        if isinstance(s, ir.Label):
            labels[s.name] = position
        elif isinstance(s, ir.Instruction):
            for name in _register_names(s.operands):
                if name in widths:
                    first.setdefault(name, position)
                    last[name] = position
            if s.opcode in ("bra", "brx"):
                for op in s.operands:
                    if isinstance(op, ir.LabelRef) and op.name in labels:
                        back_edges.append((labels[op.name], position))
            position += 1
    # A register live into a loop (first seen before its head, used inside it) is live
    # to the loop's last branch.
    for head, end in back_edges:
        for name, start in first.items():
            if start < head <= last[name] < end:
                last[name] = end
    events: list[tuple[int, int]] = []
    for name, start in first.items():
        events.append((start, widths[name]))
        events.append((last[name] + 1, -widths[name]))
    live = peak = 0
    for _at, change in sorted(events, key=lambda e: (e[0], e[1])):
        live += change
        peak = max(peak, live)
    return peak


def _register_names(operands) -> list[str]:
    out: list[str] = []
    for op in operands:
        if isinstance(op, ir.Register):
            out.append(op.name)
        elif isinstance(op, ir.Negated):
            out.append(op.register.name)
        elif isinstance(op, ir.Address) and isinstance(op.base, ir.Register):
            out.append(op.base.name)
        elif isinstance(op, ir.Vector):
            out.extend(_register_names(op.elements))
        elif isinstance(op, ir.ParenList):
            out.extend(_register_names(op.items))
        elif isinstance(op, ir.PredPair):
            out.extend(_register_names((op.first, op.second)))
    return out
