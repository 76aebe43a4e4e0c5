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
CLUSTERID = tuple(SpecialReg("%clusterid", c) for c in "xyz")
NCLUSTERID = tuple(SpecialReg("%nclusterid", c) for c in "xyz")
CLUSTER_NCTAID = tuple(SpecialReg("%cluster_nctaid", c) for c in "xyz")
CLUSTER_INDEX_REGS = frozenset(CLUSTERID + NCLUSTERID)


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


def cluster_index_reads(body: Block) -> set[SpecialReg]:
    return special_reg_reads(body) & CLUSTER_INDEX_REGS


def rebuild_cluster_index(names: NameAllocator, values: dict[SpecialReg, Register],
                          needed: set[SpecialReg]) -> list[Instruction]:
    """Code computing the %clusterid / %nclusterid components in `needed` from the original
    block index and grid already in `values` and the launch's own %cluster_nctaid (a slice is
    launched with the kernel's clusters): clusterid = ctaid / cluster_nctaid, nclusterid =
    nctaid / cluster_nctaid. Adds their registers to `values`."""
    code: list[Instruction] = []
    for axis, (cid, ncid, ctaid, nctaid, width) in enumerate(zip(CLUSTERID, NCLUSTERID, CTAID, NCTAID,
                                                                    CLUSTER_NCTAID)):
        if cid not in needed and ncid not in needed:
            continue
        w = names.new_register("b32", f"cluster_nctaid_{'xyz'[axis]}")
        code.append(instr("mov.u32", w, width))
        for wanted, source, label in ((cid, ctaid, "clusterid"), (ncid, nctaid, "nclusterid")):
            if wanted in needed:
                values[wanted] = names.new_register("b32", f"{label}_{'xyz'[axis]}")
                code.append(instr("div.u32", values[wanted], values[source], w))
    return code


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
