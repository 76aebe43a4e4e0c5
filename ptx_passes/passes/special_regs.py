"""Giving a kernel its original block index back.

Sliced and PTB kernels run the original grid's blocks under other block
numbers. Both know the original block's linear index (x fastest, as in
ptx_passes.launch_plan) and the original grid, so every read of %ctaid.{x,y,z}
and %nctaid.{x,y,z} is replaced by a register computed from them:

    ctaid.x = linear % grid_x
    ctaid.y = (linear / grid_x) % grid_y
    ctaid.z = (linear / grid_x) / grid_y
    nctaid  = grid

Only the components the kernel reads are computed.
"""
from __future__ import annotations

from ..ir import (Block, Instruction, NameAllocator, Register, SpecialReg, Vector, instr,
                  iter_instructions, map_operands)

CTAID = tuple(SpecialReg("%ctaid", c) for c in "xyz")
NCTAID = tuple(SpecialReg("%nctaid", c) for c in "xyz")
BLOCK_INDEX_REGS = frozenset(CTAID + NCTAID)


def special_regs_in(ins: Instruction) -> list[SpecialReg]:
    """The special registers among an instruction's operands (they are never inside an
    address, so top-level operands and vector elements are all there is to look at)."""
    found = []
    for op in ins.operands:
        if type(op) is SpecialReg:
            found.append(op)
        elif type(op) is Vector:
            found.extend(e for e in op.elements if type(e) is SpecialReg)
    return found


def special_reg_reads(body: Block) -> set[SpecialReg]:
    """Every special register read anywhere in `body` (nested scopes included)."""
    found: set[SpecialReg] = set()
    for _block, _i, ins in iter_instructions(body):
        found.update(special_regs_in(ins))
    return found


def block_index_reads(body: Block) -> set[SpecialReg]:
    return special_reg_reads(body) & BLOCK_INDEX_REGS


def rebuild_block_index(names: NameAllocator, linear: Register, grid: tuple[Register, Register, Register],
                        needed: set[SpecialReg]) -> tuple[list[Instruction], dict[SpecialReg, Register]]:
    """Code computing the original %ctaid components in `needed` from `linear` and `grid`,
    and the register that now stands for each needed special register."""
    code: list[Instruction] = []
    values: dict[SpecialReg, Register] = {}
    for special, g in zip(NCTAID, grid):
        if special in needed:
            values[special] = g
    ctaid_x, ctaid_y, ctaid_z = CTAID
    if ctaid_x in needed:
        values[ctaid_x] = names.new_register("b32", "ctaid_x")
        code.append(instr("rem.u32", values[ctaid_x], linear, grid[0]))
    if ctaid_y in needed or ctaid_z in needed:
        plane = names.new_register("b32", "ctaid_yz")
        code.append(instr("div.u32", plane, linear, grid[0]))
        if ctaid_y in needed:
            values[ctaid_y] = names.new_register("b32", "ctaid_y")
            code.append(instr("rem.u32", values[ctaid_y], plane, grid[1]))
        if ctaid_z in needed:
            values[ctaid_z] = names.new_register("b32", "ctaid_z")
            code.append(instr("div.u32", values[ctaid_z], plane, grid[1]))
    return code, values


def replace_special_regs(body: Block, values: dict[SpecialReg, Register]) -> int:
    """Replace every read of a special register in `values` by its register, in `body` and
    its nested scopes. Returns how many instructions changed."""
    changed = 0

    def substitute(op):
        return values.get(op, op) if isinstance(op, SpecialReg) else op

    for block, i, ins in list(iter_instructions(body)):
        if not special_regs_in(ins):
            continue
        new = map_operands(ins, substitute)
        if new is not ins:
            block.statements[i] = new
            changed += 1
    return changed
