"""Slicing: a kernel that runs any contiguous range of its grid's blocks.

The host launches the sliced kernel several times as a 1-D grid of `count`
blocks, passing the first block's linear index and the original grid
(ptx_passes.launch_plan.SlicedKernel). The kernel rebuilds the original
%ctaid/%nctaid once, at its start, and reads those registers instead:

    before                                 after (<k>__tally_slice)
    .entry k(.param .u64 k_param_0)        .entry k__tally_slice(.param .u64 k_param_0,
    {                                          .param .align 8 .u32 k__tally_slice_param_tally_block_offset,
                                               .param .u32 ..._tally_grid_x, .param .u32 ..._tally_grid_y,
                                               .param .u32 ..._tally_grid_z)
                                           {
                                               ld.param.u32 %off, [..._block_offset];
                                               ld.param.u32 %gx, [..._grid_x];   (and y, z)
                                               mov.u32 %hw, %ctaid.x;
                                               add.u32 %linear, %off, %hw;
                                               rem.u32 %cx, %linear, %gx;          (special_regs.py)
                                               div.u32 %yz, %linear, %gx; rem.u32 %cy, %yz, %gy; ...
        mov.u32 %r1, %ctaid.x;                 mov.u32 %r1, %cx;
        mov.u32 %r2, %nctaid.y;                mov.u32 %r2, %gy;

A kernel that uses thread-block clusters keeps them: the scheduler cuts slices on
cluster boundaries of a launch with (w, 1, 1) clusters and launches each with those
clusters (tally/scheduler/cluster_slices.py), so %cluster_ctaid, %cluster_ctarank,
barrier.cluster, mapa and distributed shared memory see the same cluster as before;
%clusterid and %nclusterid are rebuilt from the original block index and grid and the
launch's %cluster_nctaid (special_regs.rebuild_cluster_index).

The extras start at an 8-byte aligned offset (`.align 8` on the first), as the
launch plan packs them. Only the components the kernel reads are computed; the
parameters are always there, so every sliced kernel launches the same way.
"""
from __future__ import annotations

from ..ir import Function, Module, instr, special
from .kernel_code import KernelNames, append_extra_params, insert_at_code_start, load_param
from .special_regs import (CTAID, NCLUSTERID, NCTAID, block_index_reads, cluster_index_reads,
                           rebuild_block_index, rebuild_cluster_index, replace_special_regs)

VERSION = 2

# Field order and types of launch_plan.SLICE_EXTRA ("<IIII").
SLICE_PARAMS = [("tally_block_offset", "u32"), ("tally_grid_x", "u32"), ("tally_grid_y", "u32"),
                ("tally_grid_z", "u32")]


def slice_kernel(kernel: Function, module: Module) -> None:
    """Rewrite `kernel` (already cloned and renamed) in place into its sliced form."""
    names = KernelNames(kernel, module)
    offset_param, *grid_params = append_extra_params(kernel, names, SLICE_PARAMS)
    needed = block_index_reads(kernel.body)
    cluster_needed = cluster_index_reads(kernel.body)
    # %clusterid / %nclusterid come from the original block index / grid
    for reg in cluster_needed:
        needed.add((NCTAID if reg in NCLUSTERID else CTAID)["xyz".index(reg.component)])
    if not needed:
        return
    # Load every extra; ptxas drops the loads of dimensions nothing reads.
    offset, load_offset = load_param(names, offset_param, "block_offset")
    grid, code = [], [load_offset]
    for axis, param in zip("xyz", grid_params):
        register, load = load_param(names, param, f"grid_{axis}")
        grid.append(register)
        code.append(load)
    hardware = names.new_register("b32", "hw_ctaid_x")
    linear = names.new_register("b32", "linear_block")
    code += [instr("mov.u32", hardware, special("%ctaid", "x")),
             instr("add.u32", linear, offset, hardware)]
    rebuild, values = rebuild_block_index(names, linear, tuple(grid), needed)
    rebuild += rebuild_cluster_index(names, values, cluster_needed)
    # Substitute before inserting: the inserted code itself reads the hardware %ctaid.x.
    replace_special_regs(kernel.body, values)
    insert_at_code_start(kernel.body, code + rebuild)
