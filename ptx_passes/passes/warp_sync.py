"""Which warp-level synchronizing instructions could deadlock once returned
threads stay alive.

In the original kernel a thread that returns exits, and warp operations with a
member mask (shfl.sync, vote.sync, match.sync, redux.sync, elect.sync,
bar.warp.sync) wait only for the *non-exited* threads of their mask (PTX ISA:
"wait until all non-exited threads corresponding to membermask have
executed ..."). So `if (i >= n) return; v += __shfl_down_sync(0xffffffff, v, 1);`
is a correct kernel. After unified synchronization or PTB the returned thread
is alive, waiting at a block barrier, and the shuffle of its warp siblings
waits for it: a deadlock the original does not have.

A mask operation is safe when no thread of its warp can have returned before
it runs. Statically (the mask's lanes and the branch conditions are not known):
every path from the kernel's entry to a return passes through it, and it is
not inside a loop, so every thread executes it exactly once, before returning.
Masks computed by `activemask` are safe too: returned threads are not active
in the original or here. `.aligned` warp instructions (mma, ldmatrix, wmma,
wgmma, ...) need every thread of the warp in the original already, so no
thread can have returned before them in a correct kernel.

The control-flow graph is built over the kernel body's instructions in order,
with nested scopes inlined (their labels resolved in their own scope).
"""
from __future__ import annotations

from collections import deque

from ..ir import (Block, BranchTargets, Function, Instruction, Label, LabelRef, Register,
                  Symbol)

class UnknownLabel(ValueError):
    """A branch names a label its scope does not define (ptxas would reject the kernel)."""


# Opcode -> index of the member-mask operand.
MASK_OPERAND = {"shfl": -1, "vote": -1, "match": -1, "redux": -1, "elect": -1, "bar": 0}
_END = -1


def is_mask_sync(ins: Instruction) -> bool:
    if ins.opcode == "bar":
        return ins.modifiers[:2] == ("warp", "sync")
    return ins.opcode in MASK_OPERAND and "sync" in ins.modifiers


class _Flow:
    """Successor lists over the kernel's instructions (index _END: the kernel ends)."""

    def __init__(self, body: Block):
        self.code: list[Instruction] = []
        self._pending: list[tuple[int, Instruction, list[dict[str, int]], dict[str, tuple[str, ...]]]] = []
        self._walk(body, [], {})
        self.successors = [self._successors(i, ins, scopes, tables)
                           for i, ins, scopes, tables in self._pending]

    def _walk(self, block: Block, outer: list[dict[str, int]], tables: dict[str, tuple[str, ...]]) -> None:
        labels: dict[str, int] = {}
        scopes = outer + [labels]
        tables = dict(tables)
        for s in block.statements:
            if isinstance(s, Label):
                labels[s.name] = len(self.code)
            elif isinstance(s, BranchTargets):
                tables[s.name] = s.labels
            elif isinstance(s, Instruction):
                self._pending.append((len(self.code), s, scopes, tables))
                self.code.append(s)
            elif isinstance(s, Block):
                self._walk(s, scopes, tables)

    def _resolve(self, name: str, scopes: list[dict[str, int]]) -> int:
        for labels in reversed(scopes):
            if name in labels:
                at = labels[name]
                return at if at < len(self.code) else _END     # a label closing the body
        raise UnknownLabel(name)

    def _successors(self, i: int, ins: Instruction, scopes, tables) -> list[int]:
        nxt = i + 1 if i + 1 < len(self._pending) else _END
        fall = [nxt] if ins.guard is not None else []
        if ins.opcode in ("ret", "exit", "trap"):
            return fall + [_END]
        if ins.opcode == "bra":
            target = ins.operands[0] if ins.operands else None
            if not isinstance(target, (LabelRef, Symbol)):
                raise UnknownLabel(str(target))
            return fall + [self._resolve(target.name, scopes)]
        if ins.opcode == "brx":
            table = ins.operands[-1]
            names = tables.get(table.name, ()) if isinstance(table, (LabelRef, Symbol)) else ()
            return fall + [self._resolve(n, scopes) for n in names]
        return [nxt]

    def reaches_end_without(self, avoid: int) -> bool:
        return self._reaches(0, lambda n: n == _END, avoid)

    def in_cycle(self, node: int) -> bool:
        return any(self._reaches(s, lambda n: n == node, None) for s in self.successors[node]
                   if s != _END)

    def _reaches(self, start: int, goal, avoid: int | None) -> bool:
        if not self.code:
            return True
        seen, queue = set(), deque([start])
        while queue:
            n = queue.popleft()
            if goal(n):
                return True
            if n == _END or n == avoid or n in seen:
                continue
            seen.add(n)
            queue.extend(self.successors[n])
        return False


def unsafe_mask_syncs(kernel: Function) -> list[Instruction]:
    """The member-mask warp operations of `kernel` that a thread of their warp might
    skip by returning first (see the module docstring)."""
    if not any(is_mask_sync(ins) for ins in _instructions(kernel.body)):
        return []
    out = []
    flow = _Flow(kernel.body)
    activemask_registers = _defined_only_by_activemask(flow.code)
    for i, ins in enumerate(flow.code):
        if not is_mask_sync(ins):
            continue
        mask = ins.operands[MASK_OPERAND[ins.opcode]]
        if isinstance(mask, Register) and mask.name in activemask_registers:
            continue
        if flow.reaches_end_without(i) or flow.in_cycle(i):
            out.append(ins)
    return out


def _instructions(block: Block):
    for s in block.statements:
        if isinstance(s, Instruction):
            yield s
        elif isinstance(s, Block):
            yield from _instructions(s)


def _defined_only_by_activemask(code: list[Instruction]) -> set[str]:
    by_activemask, by_other = set(), set()
    for ins in code:
        target = by_activemask if ins.opcode == "activemask" else by_other
        target.update(r.name for r in ins.defs())
    return by_activemask - by_other
