"""Which device functions a kernel can reach through `call`.

The passes rewrite the kernel's own body only, so what the functions it calls
do (read %ctaid, synchronize, exit, launch kernels) decides whether a kernel
can be transformed at all. Calls through a register (`call %rd1, ...,
prototype`) cannot be followed; they are reported, not guessed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Function, Instruction, ParenList, Register, Symbol, iter_instructions


def callee(ins: Instruction) -> Symbol | Register | None:
    """The called function of a `call` (its first operand that is not a parenthesised list)."""
    if ins.opcode != "call":
        return None
    for op in ins.operands:
        if not isinstance(op, ParenList):
            return op if isinstance(op, (Symbol, Register)) else None
    return None


@dataclass
class Reachable:
    functions: list[Function] = field(default_factory=list)   # defined here, kernel excluded
    external: list[str] = field(default_factory=list)         # declared without a body
    indirect: list[Instruction] = field(default_factory=list)  # calls through a register


def reachable_functions(kernel: Function, functions: dict[str, Function]) -> Reachable:
    """Every function the kernel can call, directly or through other functions."""
    out = Reachable()
    seen = {kernel.name}
    stack = [kernel]
    while stack:
        fn = stack.pop()
        for _block, _i, ins in iter_instructions(fn.body):
            if ins.opcode != "call":
                continue
            target = callee(ins)
            if not isinstance(target, Symbol):
                out.indirect.append(ins)
                continue
            if target.name in seen:
                continue
            seen.add(target.name)
            called = functions.get(target.name)
            if called is None or called.body is None:
                out.external.append(target.name)
            else:
                out.functions.append(called)
                stack.append(called)
    return out
