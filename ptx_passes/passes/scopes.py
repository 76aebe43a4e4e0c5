"""Flattening nested `{ }` scopes, so a barrier inside one becomes a top-level
instruction that unified synchronization can route through its barrier point.

nvcc wraps __syncthreads_count/_and/_or (and inline asm) in a scope with its own
registers, which may shadow the kernel's:

    {                                       mov.pred %tally_p1_0, ...      (no scope;
    .reg .pred %p1;                         bar.red.popc.u32 %r4, 0, %tally_p1_0;   its registers
    setp.ne.u32 %p1, %r10, 0;       ->      setp.ne.u32 %tally_p1_0, %r10, 0;       renamed to fresh
    bar.red.popc.u32 %r4, 0, %p1;           ...                                      kernel-level ones)
    }

Renaming every register and label the scope declares to a fresh function-level
name and splicing its statements into the parent changes nothing but names:
inside the scope each name meant exactly the declaration being renamed. A scope
that declares anything else (`.param`, `.local`, `.shared` variables, jump
tables, call prototypes) is not flattened; `flatten_problem` says why.
"""
from __future__ import annotations

from ..ir import (Block, Instruction, Label, LabelRef, Loc, NameAllocator, Pragma, RegDecl,
                  Register, iter_instructions, map_operands)
from .barriers import cta_barrier

_KEPT = (Instruction, Label, Loc, Pragma)


def contains_barrier(block: Block) -> bool:
    return any(cta_barrier(ins) is not None for _b, _i, ins in iter_instructions(block))


def flatten_problem(block: Block) -> str | None:
    """Why `block` (and the scopes inside it) cannot be flattened, or None if it can."""
    for s in block.statements:
        if isinstance(s, Block):
            problem = flatten_problem(s)
            if problem:
                return problem
        elif isinstance(s, RegDecl):
            if s.vector is not None or s.align is not None:
                return f"it declares a vector/aligned register {s.name}"
            if s.count is not None and s.count > 256:
                return f"it declares {s.count} registers {s.name}<{s.count}>"
        elif not isinstance(s, _KEPT):
            return f"it declares {type(s).__name__} {getattr(s, 'name', '')}".rstrip()
    return None


def flatten_scope(block: Block, names: NameAllocator, outer: dict[str, object] | None = None) -> list:
    """`block`'s statements, with its own (and its inner scopes') registers and labels
    renamed to fresh kernel-level names. Caller checks flatten_problem first."""
    renamed: dict[str, object] = dict(outer or {})
    for s in block.statements:
        if isinstance(s, RegDecl):
            for name in s.names():
                renamed[name] = names.new_register(s.type, name.lstrip("%"))
        elif isinstance(s, Label):
            renamed[s.name] = LabelRef(names.new_label(s.name.lstrip("$")))

    def rename(op):
        if isinstance(op, (Register, LabelRef)):
            return renamed.get(op.name, op)
        return op

    out = []
    for s in block.statements:
        if isinstance(s, Block):
            out += flatten_scope(s, names, renamed)
        elif isinstance(s, Instruction):
            out.append(map_operands(s, rename))
        elif isinstance(s, Label):
            out.append(Label(renamed[s.name].name))
        elif not isinstance(s, RegDecl):
            out.append(s)
    return out
