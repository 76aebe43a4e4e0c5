"""CTA barrier instructions, decoded into what the passes need to know.

The forms (PTX ISA 9.0, "barrier"):

    barrier{.cta}.sync{.aligned}               a{, b};
    barrier{.cta}.arrive{.aligned}             a, b;
    barrier{.cta}.red.popc{.aligned}.u32    d, a{, b}, {!}c;
    barrier{.cta}.red.{and,or}{.aligned}.pred p, a{, b}, {!}c;
    bar{.cta}.sync / .arrive / .red ...      (= barrier...aligned)

`a` is the barrier number (0..15), `b` an optional thread count. `bar.warp.sync`
(a warp-level barrier) and `barrier.cluster.*` (a cluster barrier) are not CTA
barriers.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Immediate, Instruction, Operand

CTA_BARRIER_OPCODES = frozenset({"bar", "barrier"})


@dataclass(frozen=True)
class CtaBarrier:
    instruction: Instruction
    action: str                    # "sync", "arrive", "red", or the unknown word
    reduction: str | None          # "popc", "and", "or" for action "red"
    barrier_id: Operand | None
    thread_count: Operand | None
    result: Operand | None         # d or p of bar.red
    vote: Operand | None           # c of bar.red (a predicate, maybe Negated)

    def unsupported_reason(self) -> str | None:
        """Why unified synchronization cannot route this barrier through its single
        barrier point, or None if it can."""
        text = " ".join(str(self.instruction).split())
        if self.action not in ("sync", "red"):
            return (f"`{text}`: barrier .{self.action} (a producer/consumer barrier) has no "
                    "equivalent at a single all-threads synchronization point")
        if self.action == "red" and (self.reduction not in ("popc", "and", "or")
                                     or self.result is None or self.vote is None):
            return f"`{text}`: not a barrier reduction the passes know"
        if self.barrier_id is None:
            return f"`{text}`: a barrier without a barrier number"
        if not isinstance(self.barrier_id, Immediate):
            return f"`{text}`: the barrier number is a register, so which threads meet is not known"
        if self.thread_count is not None:
            return (f"`{text}`: a barrier with a thread count synchronizes a subset of the block "
                    "(named/counted barriers are not supported)")
        return None


def cta_barrier(ins: Instruction) -> CtaBarrier | None:
    """The decoded CTA barrier, or None if `ins` is not one."""
    if ins.opcode not in CTA_BARRIER_OPCODES or not ins.modifiers:
        return None
    mods = ins.modifiers[1:] if ins.modifiers[0] == "cta" else ins.modifiers
    if not mods or mods[0] in ("warp", "cluster"):
        return None
    action = mods[0]
    ops = ins.operands
    if action == "red":
        reduction = mods[1] if len(mods) > 1 else None
        result = ops[0] if ops else None
        vote = ops[-1] if len(ops) >= 3 else None
        barrier_id = ops[1] if len(ops) >= 2 else None
        count = ops[2] if len(ops) == 4 else None
        return CtaBarrier(ins, action, reduction, barrier_id, count, result, vote)
    barrier_id = ops[0] if ops else None
    count = ops[1] if len(ops) >= 2 else None
    return CtaBarrier(ins, action, None, barrier_id, count, None, None)
