"""PTB (persistent thread blocks): a kernel whose blocks are workers that take the
original grid's blocks as tasks, so the host can stop it between tasks and
relaunch it later to carry on (ptx_passes.launch_plan.PTBKernel).

The pipeline runs unified synchronization first ("ptb"), so the body's only
`ret` is the point where every thread of the block has returned; "ptb-raw"
skips that (only for demonstrating why it is needed: a block whose threads
return at different times deadlocks between the body's barrier and the task
barrier below).

    before                              after (<k>__tally_ptb)
    .entry k(.param .u64 k_param_0)     .entry k__tally_ptb(.param .u64 k_param_0,
    {                                       .param .align 8 .u64 ..._task_counter, .param .u64 ..._preempt_flag,
                                            .param .u32 ..._grid_x, ..._grid_y, ..._grid_z)
                                        {
                                            .shared .align 8 .b8 __tally_task_slot[8];
                                            (load the extras; %total = grid_x*grid_y*grid_z;
                                             %leader = thread (0,0,0); %slot = __tally_task_slot)
                                        $next_task:
                                            @!%leader bra $published;
                                            ld.volatile.global.u32 %flag, [%preempt_flag];
                                            setp.ne.u32 %stop, %flag, 0;
                                            mov.u32 %task, %total;                 (stop: no task)
                                            @!%stop atom.global.add.u32 %task, [%task_counter], 1;
                                            st.shared.u32 [%slot], %task;
                                        $published:
                                            barrier.sync 15;
                                            ld.shared.u32 %task, [%slot];
                                            xor.b32 %slot, %slot, 4;               (two slots, alternating)
                                            setp.ge.u32 %done, %task, %total;
                                            @%done ret;                            (the only real return)
                                            (rebuild %ctaid from %task, special_regs.py)
        mov.u32 %r1, %ctaid.x;              mov.u32 %r1, %ctaid_x;
        ...                                 ...
        @%all ret;                          @%all bra $next_task;

One barrier per task is enough because the slot alternates between two words:
the leader writes word i%2 for task i before barrier i, and writes that word again
only for task i+2, after passing barrier i+1, which every thread reaches only
after reading word i%2 for task i. The barrier is non-.aligned (threads arrive
from different returns) and numbered 15, so in the raw form a thread waiting for
its next task never pairs with siblings waiting at the body's barrier 0 (that is
the deadlock unified synchronization removes).

Preemption: the host sets the flag; each worker's leader sees it before taking
its next task, so every task taken completes and none is started after. The
counter then says how many tasks were taken; a relaunch with the flag cleared
continues from there. Shared memory and registers carry nothing between tasks
that the original kernel could rely on (a new block starts with undefined
shared memory and registers), and the task barrier orders one task's shared
memory accesses before the next task's.
"""
from __future__ import annotations

from ..ir import (Block, Function, Instruction, Module, Label, VarDecl, addr, imm, instr,
                  label_ref, special, sym)
from .kernel_code import KernelNames, append_extra_params, insert_at_code_start, load_param
from .special_regs import block_index_reads, rebuild_block_index, replace_special_regs

VERSION = 1

TASK_BARRIER_ID = 15
# Field order and types of launch_plan.PTB_EXTRA ("<QQIII").
PTB_PARAMS = [("tally_task_counter", "u64"), ("tally_preempt_flag", "u64"),
              ("tally_grid_x", "u32"), ("tally_grid_y", "u32"), ("tally_grid_z", "u32")]
_RETURNS = ("ret", "exit")


def make_persistent(kernel: Function, module: Module) -> None:
    """Rewrite `kernel` (already cloned, renamed and, for "ptb", unified) in place."""
    names = KernelNames(kernel, module)
    counter_param, flag_param, *grid_params = append_extra_params(kernel, names, PTB_PARAMS)
    next_task = names.new_label("next_task")
    published = names.new_label("published")
    kernel.body.statements = _retarget_returns(kernel.body, next_task)

    prologue = []
    counter, load = load_param(names, counter_param, "task_counter")
    prologue += [load, instr("cvta.to.global.u64", counter, counter)]
    flag, load = load_param(names, flag_param, "preempt_flag")
    prologue += [load, instr("cvta.to.global.u64", flag, flag)]
    grid = []
    for axis, param in zip("xyz", grid_params):
        register, load = load_param(names, param, f"grid_{axis}")
        grid.append(register)
        prologue.append(load)
    total = names.new_register("b32", "total_tasks")
    prologue += [instr("mul.lo.u32", total, grid[0], grid[1]),
                 instr("mul.lo.u32", total, total, grid[2])]
    thread_bits = names.new_register("b32", "thread_bits")
    tid = names.new_register("b32", "tid")
    leader = names.new_register("pred", "leader")
    prologue += [instr("mov.u32", thread_bits, special("%tid", "x"))]
    for axis in "yz":
        prologue += [instr("mov.u32", tid, special("%tid", axis)),
                     instr("or.b32", thread_bits, thread_bits, tid)]
    prologue.append(instr("setp.eq.u32", leader, thread_bits, imm(0)))
    slot_name = names.new_symbol("__tally_task_slot")
    slot = names.new_register("b32", "task_slot")
    prologue.append(instr("mov.u32", slot, sym(slot_name)))

    flag_value = names.new_register("b32", "flag")
    stop = names.new_register("pred", "stop")
    task = names.new_register("b32", "task")
    done = names.new_register("pred", "done")
    task_loop = [
        Label(next_task),
        instr("bra", label_ref(published), guard=leader, negated=True),
        instr("ld.volatile.global.u32", flag_value, addr(flag)),
        instr("setp.ne.u32", stop, flag_value, imm(0)),
        instr("mov.u32", task, total),
        instr("atom.global.add.u32", task, addr(counter), imm(1), guard=stop, negated=True),
        instr("st.shared.u32", addr(slot), task),
        Label(published),
        instr("barrier.sync", imm(TASK_BARRIER_ID)),
        instr("ld.shared.u32", task, addr(slot)),
        instr("xor.b32", slot, slot, imm(4)),
        instr("setp.ge.u32", done, task, total),
        instr("ret", guard=done),
    ]
    rebuild, values = rebuild_block_index(names, task, tuple(grid), block_index_reads(kernel.body))
    replace_special_regs(kernel.body, values)
    slot_decl = VarDecl("shared", "b8", slot_name, align=8, array_dims=(8,))
    insert_at_code_start(kernel.body, [slot_decl] + prologue + task_loop + rebuild)


def _retarget_returns(block: Block, target: str) -> list:
    """The block's statements with every ret/exit (same guard) replaced by a branch to
    `target`; nested scopes too (branching out of a scope is allowed)."""
    out = []
    for s in block.statements:
        if isinstance(s, Block):
            out.append(Block(_retarget_returns(s, target)))
        elif isinstance(s, Instruction) and s.opcode in _RETURNS:
            out.append(instr("bra", label_ref(target), guard=s.guard))
        else:
            out.append(s)
    return out
