"""Unified synchronization: every barrier and every return of a kernel goes
through one barrier point, so threads that return early still take part in the
barriers the other threads reach later.

Why: once PTB keeps a block's threads alive between tasks, a thread that
returned early no longer exits; it waits for the next task while its siblings
wait at a `bar.sync` it will never reach. Here a returning thread instead
loops at the central barrier until every thread of the block returns; a
thread reaching a barrier meets it there and then resumes after its own
barrier.

    before                              after
        mov.u32 %r1, %tid.x;                mov.pred %ret, 0;
        setp.ge.s32 %p1, %r1, %r9;          mov.u32 %r1, %tid.x;
        @%p1 bra $L_end;                    setp.ge.s32 %p1, %r1, %r9;
        st.shared.u32 [t], %r1;             @%p1 bra $L_end;
        bar.sync 0;                         st.shared.u32 [t], %r1;
        ld.shared.u32 %r2, [t+4];           mov.u32 %site, 1;        (only with > 1 site)
    $L_end:                                 bra $sync;
        ret;                            $resume_1:
                                            ld.shared.u32 %r2, [t+4];
                                        $L_end:
                                            bra $return;
                                            bra $return;             (a body that falls off its end)
                                        $return:
                                            mov.pred %ret, 1;
                                        $sync:
                                            barrier.red.and.pred %all, 0, %ret;   (the one barrier)
                                            @%all ret;                            (the one return)
                                            @%ret bra $sync;       (returned threads wait for the rest)
                                            setp.eq.u32 %p, %site, 1; @%p bra $resume_1; ...
                                            bra $resume_N;

The central barrier is `barrier.red` without `.aligned`: threads of one warp
may reach it from different places (a returned lane loops while its siblings
run on), which sm_70+ allows. Barrier numbers collapse to 0: every supported
barrier has no thread count, so all threads of the block meet at each one in
the original too, in the same order.

`bar.red.{popc,and,or}` (__syncthreads_count/_and/_or) is supported with a
second barrier right after the first, executed by every thread in every round:
`barrier.red.popc.u32 %count, 0, %vote`. Live threads vote their predicate
(negated for .and), returned threads vote false, so the count over live
threads gives popc directly, `or` as count != 0 and `and` as count == 0
(threads that have returned do not take part in the original's reduction either).

Kernels without CTA barriers are left unchanged. Rets and exits inside nested
scopes become branches out of the scope (allowed). A nested scope holding a
barrier (nvcc wraps __syncthreads_count/_and/_or in one) is first flattened
into the body with its registers renamed (scopes.py). Barriers in device
functions, with thread counts or register numbers, bar.arrive, and barriers in
scopes that declare more than registers are refused by the safety check (and
by this pass if called directly).
Warp-level operations (bar.warp.sync, shfl/vote/match .sync) are untouched: a
thread that returned early is not in any of their member masks in a correct
original program, and it stays out of them here.
"""
from __future__ import annotations

from ..ir import (Block, Function, Guard, Instruction, Label, Module, Negated, imm, instr,
                  iter_instructions, label_ref)
from .barriers import CtaBarrier, cta_barrier
from .errors import PassRefused
from .kernel_code import KernelNames, insert_at_code_start
from .scopes import contains_barrier, flatten_problem, flatten_scope

VERSION = 1

CENTRAL_BARRIER_ID = 0
_RETURNS = ("ret", "exit")


def kernel_barriers(kernel: Function) -> list[CtaBarrier]:
    """Every CTA barrier of the kernel body, nested scopes included."""
    return [b for _blk, _i, ins in iter_instructions(kernel.body) if (b := cta_barrier(ins))]


def unify_synchronization(kernel: Function, module: Module) -> bool:
    """Rewrite `kernel` in place. Returns False (and changes nothing) if it has no CTA barrier."""
    barriers = kernel_barriers(kernel)
    if not barriers:
        return False
    for b in barriers:
        problem = b.unsupported_reason()
        if problem:
            raise PassRefused(problem)
    names = KernelNames(kernel, module)
    _flatten_scopes_with_barriers(kernel.body, names)
    _Rewriter(kernel, names, len(barriers), any(b.action == "red" for b in barriers)).run()
    return True


def _flatten_scopes_with_barriers(body: Block, names: KernelNames) -> None:
    """Barriers must be top-level statements to have a resume label after them."""
    scopes = [s for s in body.statements if isinstance(s, Block) and contains_barrier(s)]
    for scope in scopes:
        problem = flatten_problem(scope)
        if problem:
            raise PassRefused(f"a barrier is inside a nested {{ }} scope that cannot be "
                              f"flattened: {problem}")
        flat = flatten_scope(scope, names)     # declares registers: body.statements grows
        at = next(i for i, s in enumerate(body.statements) if s is scope)
        body.statements[at:at + 1] = flat


class _Rewriter:
    def __init__(self, kernel: Function, names: KernelNames, site_count: int, has_reductions: bool):
        self.kernel = kernel
        self.names = names
        self.has_reductions = has_reductions
        self.returning = self.names.new_register("pred", "returning")
        self.all_returning = self.names.new_register("pred", "all_returning")
        # Which barrier a thread came from; with a single barrier there is nothing to record.
        self.site = self.names.new_register("b32", "barrier_site") if site_count > 1 else None
        self.sync_label = self.names.new_label("sync")
        self.return_label = self.names.new_label("return")
        if has_reductions:
            self.vote = self.names.new_register("pred", "vote")
            self.count = self.names.new_register("b32", "vote_count")
        self.resume_labels: list[str] = []

    def run(self) -> None:
        body = self.kernel.body
        body.statements = self._rewrite(body, top_level=True)
        init = [instr("mov.pred", self.returning, imm(0))]
        if self.has_reductions:
            init.append(instr("mov.pred", self.vote, imm(0)))
        insert_at_code_start(body, init)
        body.statements += self._central_point(falls_through=not _ends_in_jump(body))

    def _rewrite(self, block: Block, top_level: bool) -> list:
        out = []
        for s in block.statements:
            if isinstance(s, Block):
                out.append(Block(self._rewrite(s, top_level=False)))
            elif isinstance(s, Instruction) and s.opcode in _RETURNS:
                out.append(instr("bra", label_ref(self.return_label), guard=s.guard))
            elif isinstance(s, Instruction) and top_level and (b := cta_barrier(s)) is not None:
                out += self._barrier_site(b)
            else:
                out.append(s)
        return out

    def _barrier_site(self, barrier: CtaBarrier) -> list:
        """Jump to the central point, and come back to a fresh label right after."""
        guard = barrier.instruction.guard
        number = len(self.resume_labels) + 1
        resume = self.names.new_label(f"resume_{number}")
        self.resume_labels.append(resume)
        code = []
        if barrier.action == "red":
            code.append(self._vote(barrier, guard))
        if self.site is not None:
            code.append(_guarded(instr("mov.u32", self.site, imm(number)), guard))
        code += [_guarded(instr("bra", label_ref(self.sync_label)), guard), Label(resume)]
        if barrier.action == "red":
            code.append(self._result(barrier, guard))
        return code

    def _vote(self, barrier: CtaBarrier, guard: Guard | None) -> Instruction:
        """%vote = the thread's contribution to the popc the central point counts."""
        vote = barrier.vote
        negated = isinstance(vote, Negated)
        source = vote.register if negated else vote
        if barrier.reduction == "and":
            negated = not negated      # and(p) over live threads == (count of !p) == 0
        opcode = "not.pred" if negated else "mov.pred"
        return _guarded(instr(opcode, self.vote, source), guard)

    def _result(self, barrier: CtaBarrier, guard: Guard | None) -> Instruction:
        d = barrier.result
        if barrier.reduction == "popc":
            ins = instr("mov.u32", d, self.count)
        elif barrier.reduction == "or":
            ins = instr("setp.ne.u32", d, self.count, imm(0))
        else:
            ins = instr("setp.eq.u32", d, self.count, imm(0))
        return _guarded(ins, guard)

    def _central_point(self, falls_through: bool) -> list:
        returning, all_returning = self.returning, self.all_returning
        # A body that can fall off its end returns there.
        code = [instr("bra", label_ref(self.return_label))] if falls_through else []
        code += [Label(self.return_label), instr("mov.pred", returning, imm(1))]
        if self.has_reductions:
            code.append(instr("mov.pred", self.vote, imm(0)))
        code += [Label(self.sync_label),
                 instr("barrier.red.and.pred", all_returning, imm(CENTRAL_BARRIER_ID), returning),
                 instr("ret", guard=all_returning)]
        if self.has_reductions:
            code.append(instr("barrier.red.popc.u32", self.count, imm(CENTRAL_BARRIER_ID), self.vote))
        code.append(instr("bra", label_ref(self.sync_label), guard=returning))
        code += self._dispatch()
        return code

    def _dispatch(self) -> list:
        """Back to the barrier site this thread came from (every live thread came from the
        same one in a correct program, but each thread only needs its own)."""
        code = []
        *tested, last = self.resume_labels
        if tested:
            at_site = self.names.new_register("pred", "at_site")
            for number, label in enumerate(tested, start=1):
                code += [instr("setp.eq.u32", at_site, self.site, imm(number)),
                         instr("bra", label_ref(label), guard=at_site)]
        code.append(instr("bra", label_ref(last)))
        return code


def _ends_in_jump(body: Block) -> bool:
    last = body.statements[-1] if body.statements else None
    return isinstance(last, Instruction) and last.opcode == "bra" and last.guard is None


def _guarded(ins: Instruction, guard: Guard | None) -> Instruction:
    if guard is None:
        return ins
    return Instruction(ins.opcode, ins.modifiers, ins.operands, guard)
