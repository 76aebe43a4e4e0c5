"""Safety check: which kernels a pass must leave alone, and why. It only reports.

A kernel is refused (per pass, with one line per reason) when the
transformation would change what it computes or could hang it:

every pass
  * grid-wide synchronization: cooperative groups' grid.sync() (nvcc 13 reads
    the grid workspace from %envreg1/%envreg2; older runtimes called
    cudaCGSynchronizeGrid): blocks of a sliced or preempted grid are not all
    resident, so grid.sync() would wait forever;
  * clusters (.explicitcluster, .reqnctapercluster, %cluster_*, barrier.cluster,
    mapa, getctarank, .shared::cluster loads/stores/atomics, .multicast::cluster):
    cluster membership is derived from the hardware block index;
  * dynamic parallelism (cudaLaunchDevice, cudaGetParameterBuffer, __cudaCDP2*):
    child grids and their synchronization are outside what a relaunch restores;
  * griddepcontrol (programmatic dependent launch) and %gridid: both are about
    the launch itself, which slicing and PTB split into several;
  * calls through a register and calls to functions whose body is not in the
    module (other than vprintf, malloc, free, __assertfail): what they do is
    unknown;
slicing, ptb, ptb-raw
  * %ctaid / %nctaid read inside a device function: only the kernel body is
    rewritten;
unified-sync (only kernels with barriers), ptb
  * barriers the single synchronization point cannot stand for: bar.arrive,
    thread counts (named producer/consumer barriers), a register as barrier
    number, barriers inside device functions or inside a nested { } scope that
    declares more than registers (scopes.py), and `exit` inside a device function;
  * targets below sm_70 or PTX ISA below 6.0 (the non-.aligned barrier that
    divergent threads may reach from different places needs both);
unified-sync (only kernels with barriers), ptb, ptb-raw
  * a member-mask warp operation (shfl/vote/match/redux/elect .sync, bar.warp.sync)
    that a thread of its warp may skip by returning first: the returned thread
    stays alive in these forms and the warp operation would wait for it
    (warp_sync.py says exactly when);
ptb, ptb-raw
  * %total_smem_size / %aggr_smem_size (PTB adds 8 bytes of shared memory), a
    32-bit address size (the state pointers are 64-bit), `exit` in a device
    function (a worker thread must never leave the task loop), targets below
    sm_70 / PTX 6.0;
ptb-raw (PTB without unified synchronization)
  * a barrier numbered 15 or by register (PTB's own task barrier is number 15).

Allowed on purpose: %smid/%nsmid/%warpid, %clock*, %globaltimer (they already
differ from run to run, and each block still runs on one SM), %dynamic_smem_size
(unchanged), `trap`, warp-level operations, mbarriers and TMA copies into the
block's own shared memory.

Instructions other than calls, barriers, ret/exit and the ones named above do
not interact with the rewrites (they never see the block index or the launch),
so they pass through unchanged; the parser already rejects unknown opcodes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..ir import Block, Function, Immediate, Instruction, Module, SpecialReg, iter_instructions
from .barriers import cta_barrier
from .scopes import contains_barrier, flatten_problem
from .callgraph import reachable_functions
from .special_regs import BLOCK_INDEX_REGS, special_regs_in
from .warp_sync import UnknownLabel, unsafe_mask_syncs

VERSION = 2

PASS_NAMES = ("slicing", "unified-sync", "ptb", "ptb-raw")
PTB_BARRIER_ID = 15
ALLOWED_EXTERNAL_FUNCTIONS = frozenset({"vprintf", "malloc", "free", "__assertfail"})
_DYNAMIC_PARALLELISM = re.compile(r"^(__cudaCDP|cudaCDP|cudaLaunchDevice|cudaGetParameterBuffer|"
                                  r"cudaDeviceSynchronize)")
_GRID_SYNC_FUNCTIONS = re.compile(r"^(cudaCGSynchronizeGrid|cudaCGGetIntrinsicHandle|cudaCGSynchronize)")
_CLUSTER_REGS = frozenset({"%clusterid", "%nclusterid", "%cluster_ctaid", "%cluster_nctaid",
                           "%cluster_ctarank", "%cluster_nctarank", "%is_explicit_cluster"})
# Cluster features a slice keeps working: the scheduler slices a launch with (w, 1, 1)
# clusters on cluster boundaries and launches each slice with the same clusters, so a
# block's cluster is the same blocks as before (slicing.py re-bases %clusterid and
# %nclusterid). PTB, whose workers take blocks one at a time, keeps none of them.
_CLUSTER_DIRECTIVES = frozenset({"explicitcluster", "maxclusterrank"})
# Compile-time cluster shapes and "blocks are clusters" are not given to the scheduler
# with the launch, so it could not cut slices on their boundaries.
_UNSLICEABLE_CLUSTER_DIRECTIVES = frozenset({"reqnctapercluster", "blocksareclusters"})
_CLUSTER_OPCODES = frozenset({"mapa", "getctarank"})
_CLUSTER_ID_REGS = frozenset({"%clusterid", "%nclusterid"})
_SMEM_SIZE_REGS = frozenset({"%total_smem_size", "%aggr_smem_size"})
_MIN_SM = 70
_MIN_PTX = (6, 0)


@dataclass
class KernelFacts:
    """What the passes need to know about one kernel, gathered in one walk over it and
    every device function it calls. Each list holds ready-made reason lines."""

    name: str
    every_pass: list[str] = field(default_factory=list)
    cluster_uses: list[str] = field(default_factory=list)   # every pass but slicing
    block_index_in_functions: list[str] = field(default_factory=list)
    barrier_problems: list[str] = field(default_factory=list)
    exit_in_functions: list[str] = field(default_factory=list)
    smem_size_reads: list[str] = field(default_factory=list)
    target_problems: list[str] = field(default_factory=list)
    address_problems: list[str] = field(default_factory=list)
    ptb_barrier_clash: list[str] = field(default_factory=list)
    warp_sync_hazards: list[str] = field(default_factory=list)
    has_barriers: bool = False


def kernel_facts(module: Module, kernel: Function, functions: dict[str, Function]) -> KernelFacts:
    facts = KernelFacts(kernel.name)
    _check_module(module, facts)
    for d in kernel.directives:
        if d.name in _UNSLICEABLE_CLUSTER_DIRECTIVES:
            _add(facts.every_pass, f"clusters: the kernel declares .{d.name}")
        elif d.name in _CLUSTER_DIRECTIVES:
            _add(facts.cluster_uses, f"clusters: the kernel declares .{d.name}")
    reach = reachable_functions(kernel, functions)
    for ins in reach.indirect:
        _add(facts.every_pass, f"indirect call `{_show(ins)}`: the called function cannot be known")
    for name in reach.external:
        _check_external(name, facts)
    _scan(kernel.body, "the kernel", True, facts)
    for s in kernel.body.statements:
        if isinstance(s, Block) and contains_barrier(s):
            problem = flatten_problem(s)
            if problem:
                _add(facts.barrier_problems, f"a barrier is inside a nested {{ }} scope that "
                                             f"cannot be flattened: {problem}")
    for fn in reach.functions:
        _scan(fn.body, f"device function {fn.name}", False, facts)
    try:
        hazards = unsafe_mask_syncs(kernel)
    except UnknownLabel as exc:
        hazards = []
        _add(facts.every_pass, f"the kernel branches to {exc}, which is not a label in scope")
    if hazards:
        more = f" (and {len(hazards) - 1} more)" if len(hazards) > 1 else ""
        _add(facts.warp_sync_hazards,
             f"`{_show(hazards[0])}`{more} may run after a thread of its warp returned (a return "
             "path skips it, or it repeats in a loop): that thread would stay alive waiting at a "
             "block barrier, and the warp operation, which waits for every non-exited thread of "
             "its member mask, would wait for it forever")
    return facts


def refusal_reasons(facts: KernelFacts, pass_name: str) -> list[str]:
    """Why `pass_name` must not transform the kernel (empty: it may)."""
    if pass_name not in PASS_NAMES:
        raise ValueError(f"unknown pass {pass_name!r}; passes are {', '.join(PASS_NAMES)}")
    reasons = list(facts.every_pass)
    if pass_name != "slicing":
        reasons += facts.cluster_uses
    uses_block_index_rewrite = pass_name != "unified-sync"
    unifies = pass_name == "ptb" or (pass_name == "unified-sync" and facts.has_barriers)
    is_ptb = pass_name in ("ptb", "ptb-raw")
    if uses_block_index_rewrite:
        reasons += facts.block_index_in_functions
    if unifies:
        reasons += facts.barrier_problems
    if unifies or is_ptb:
        reasons += facts.exit_in_functions + facts.target_problems + facts.warp_sync_hazards
    if is_ptb:
        reasons += facts.smem_size_reads + facts.address_problems
    if pass_name == "ptb-raw":
        reasons += facts.ptb_barrier_clash
    return list(dict.fromkeys(reasons))


def check_kernel(module: Module, kernel: Function, pass_name: str,
                 functions: dict[str, Function] | None = None) -> list[str]:
    """The safety check as one call: reasons `pass_name` must leave `kernel` alone."""
    if functions is None:
        from .kernel_code import functions_by_name
        functions = functions_by_name(module)
    return refusal_reasons(kernel_facts(module, kernel, functions), pass_name)


# ---------------------------------------------------------------------------- the walk


def _show(ins: Instruction) -> str:
    """The instruction as one line with single spaces (the printer separates with tabs)."""
    return " ".join(str(ins).split())


def _add(reasons: list[str], line: str) -> None:
    if line not in reasons:
        reasons.append(line)


def _check_module(module: Module, facts: KernelFacts) -> None:
    sm = _sm_version(module.targets)
    if sm is not None and sm < _MIN_SM:
        _add(facts.target_problems, f"target sm_{sm} is below sm_70: the passes' barriers may be "
                                    "reached by divergent threads, which needs sm_70 or newer")
    ptx = tuple(int(x) for x in module.version.split("."))
    if ptx < _MIN_PTX:
        _add(facts.target_problems, f"PTX ISA {module.version} is below 6.0, which has no "
                                    "barrier.sync/barrier.red for divergent threads")
    if module.address_size != 64:
        _add(facts.address_problems, f"address size {module.address_size or 'unspecified (32)'}: "
                                     "PTB's task counter and preempt flag are 64-bit pointers")


def _sm_version(targets: tuple[str, ...]) -> int | None:
    for t in targets:
        m = re.fullmatch(r"sm_([0-9]+)[a-z]?", t)
        if m:
            return int(m.group(1))
    return None


def _check_external(name: str, facts: KernelFacts) -> None:
    if name in ALLOWED_EXTERNAL_FUNCTIONS:
        return
    if _DYNAMIC_PARALLELISM.match(name):
        _add(facts.every_pass, f"dynamic parallelism: calls {name} (launches child grids "
                               "from the device)")
    elif _GRID_SYNC_FUNCTIONS.match(name):
        _add(facts.every_pass, f"grid-wide synchronization: calls {name}")
    else:
        _add(facts.every_pass, f"calls external function {name}, whose body is not in this "
                               "module, so what it does to the block index or barriers is unknown")


def _scan(body: Block, where: str, in_kernel: bool, facts: KernelFacts) -> None:
    for _block, _i, ins in iter_instructions(body):
        _check_instruction(ins, where, in_kernel, facts)


def _check_instruction(ins: Instruction, where: str, in_kernel: bool, facts: KernelFacts) -> None:
    for special in special_regs_in(ins):
        _check_special(special, where, in_kernel, facts)
    op = ins.opcode
    if op == "exit" and not in_kernel:
        _add(facts.exit_in_functions, f"{where} executes `exit`: a thread leaving the kernel "
                                      "from a device function cannot be kept in the task loop or "
                                      "at the synchronization point")
    elif op == "griddepcontrol":
        _add(facts.every_pass, f"programmatic dependent launch: `{_show(ins)}` in {where}")
    elif op == "clusterlaunchcontrol":
        _add(facts.every_pass, f"clusters: `{_show(ins)}` in {where} (cluster launch control)")
    elif op in _CLUSTER_OPCODES or (op == "barrier" and "cluster" in ins.modifiers[:1]):
        _add(facts.cluster_uses, f"clusters: `{_show(ins)}` in {where}")
    elif any(m == "multicast::cluster" for m in ins.modifiers) or (
            op in ("ld", "st", "atom", "red", "mbarrier") and "shared::cluster" in ins.modifiers):
        _add(facts.cluster_uses, f"clusters (distributed shared memory): `{_show(ins)}` in {where}")
    barrier = cta_barrier(ins)
    if barrier is None:
        return
    facts.has_barriers = True
    problem = barrier.unsupported_reason()
    if problem:
        _add(facts.barrier_problems, f"{problem} in {where}")
    if not in_kernel:
        _add(facts.barrier_problems, f"barrier `{_show(ins)}` inside {where}: unified synchronization "
                                     "needs every barrier in the kernel body")
    if not isinstance(barrier.barrier_id, Immediate) or barrier.barrier_id.value == PTB_BARRIER_ID:
        _add(facts.ptb_barrier_clash, f"`{_show(ins)}` in {where} may use barrier {PTB_BARRIER_ID}, "
                                      "which PTB uses for its task hand-out")


def _check_special(special: SpecialReg, where: str, in_kernel: bool, facts: KernelFacts) -> None:
    name = special.name
    if name.startswith("%envreg"):
        _add(facts.every_pass, f"grid-wide synchronization: {where} reads {name} (cooperative "
                               "groups' grid workspace), and grid.sync() needs every block resident")
    elif name in _CLUSTER_REGS:
        _add(facts.cluster_uses, f"clusters: {where} reads {special}")
        if name in _CLUSTER_ID_REGS and not in_kernel:
            _add(facts.block_index_in_functions, f"{where} reads {special}; only the kernel body's "
                                                 "cluster index is rewritten")
    elif name == "%gridid":
        _add(facts.every_pass, f"{where} reads %gridid, which differs between the launches "
                               "a sliced or preempted kernel is split into")
    elif name in _SMEM_SIZE_REGS:
        _add(facts.smem_size_reads, f"{where} reads {name}, which PTB's task slot (8 bytes of "
                                    "shared memory) would change")
    elif special in BLOCK_INDEX_REGS and not in_kernel:
        _add(facts.block_index_in_functions, f"{where} reads {special}; only the kernel body's "
                                             "block index is rewritten")
