"""Lowering of control flow and warp/block synchronization: bra, call, ret,
exit, trap, bar/barrier (incl. barrier.cluster), shfl, vote, match, redux, elect, activemask.

A call to a `.func` becomes `call` (copy the argument bytes into the callee's
frame, push the return address) plus, when there are return values, a
`retcopy` right after it, where the callee returns to. `vprintf`,
`__assertfail` (a failed device assert), `malloc`/`free` (the launch's device
heap, csrc/src/emulator/device_malloc.cpp) and the system calls of a kernel's own
launches (csrc/src/emulator/device_launch.cpp) are built in.
"""
from __future__ import annotations

from ptx_passes import ir
from tally._core import emulator as core
from tally.backends.emulator.context import FLAGS, NO_SLOT, FunctionLowering, Lowerers
from tally.backends.emulator.layout import FrameLayout, var_size

# This family's instructions by opcode (lowering.py joins the families).
CONTROL = Lowerers()

MASK = core.MEMBER_MASK_OPERAND
# The driver's system calls behind a kernel's own launches (CUDA dynamic parallelism,
# csrc/src/emulator/device_launch.cpp): name -> (the emulator's instruction, argument sizes).
DEVICE_LAUNCH_CALLS = {
    "__cuda_syscall_cnpv2GetParameterBufferV2": ("cdp.parameter_buffer", (8, 12, 12, 4)),
    "__cuda_syscall_cnpv2LaunchDeviceV2": ("cdp.launch", (8, 8)),
    "__cuda_syscall_cnpv2GetLastError": ("cdp.get_last_error", ()),
    "__cuda_syscall_cnpv2SetLastError": ("cdp.set_last_error", (4,)),
    # device-side streams and events: handles; children run in launch order anyway
    # (csrc/src/emulator/device_launch.cpp)
    "__cuda_syscall_cnpv2StreamCreate": ("cdp.create_handle", (8, 4)),
    "__cuda_syscall_cnpv2EventCreate": ("cdp.create_handle", (8, 4)),
    "__cuda_syscall_cnpv2StreamDestroy": ("cdp.ordered_anyway", (8,)),
    "__cuda_syscall_cnpv2EventDestroy": ("cdp.ordered_anyway", (8,)),
    "__cuda_syscall_cnpv2EventRecord": ("cdp.ordered_anyway", (8, 8)),
    "__cuda_syscall_cnpv2StreamWaitEvent": ("cdp.ordered_anyway", (8, 8, 4)),
    "__cuda_syscall_cnpv2GetDevice": ("cdp.write_int", (8,)),
    "__cuda_syscall_cnpv2GetDeviceCount": ("cdp.write_int", (8,)),
}
# what cdp.write_int stores: the job sees its one device
WRITTEN_INTS = {"__cuda_syscall_cnpv2GetDevice": 0, "__cuda_syscall_cnpv2GetDeviceCount": 1}
BUILTINS = ("vprintf", "__assertfail", "malloc", "free", *DEVICE_LAUNCH_CALLS)
# The built-ins that allocate from the job's device heap: a kernel that reaches one needs
# it (a device-side launch's parameter buffer comes from there too).
HEAP_FUNCTIONS = frozenset({"malloc", "free", "__cuda_syscall_cnpv2GetParameterBufferV2"})


@CONTROL.lowers("bra")
def lower_bra(cx: FunctionLowering, ins: ir.Instruction) -> None:
    target = ins.operands[0]
    if not isinstance(target, ir.LabelRef):
        raise cx.unsupported("a branch to a computed target")
    cx.emit("bra", [], label=target.name)


@CONTROL.lowers("brx")
def lower_brx(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if not ins.has("idx") or len(ins.operands) != 2 or not isinstance(ins.operands[1], ir.LabelRef):
        raise cx.unsupported(ins.full_opcode)
    index, table = ins.operands
    decl = _find_statement(cx.fn, ir.BranchTargets, table.name)
    if decl is None:
        raise cx.unsupported(f"brx.idx with the unknown target list {table.name}")
    table_id = cx.kernel.program.add_jump_table([0] * len(decl.labels))
    cx.jump_table_fixups.append((table_id, tuple(cx.label_key(label) for label in decl.labels)))
    cx.emit("brx.idx", [cx.src(index, "u32")], imm=table_id)


def _find_statement(fn: ir.Function, kind: type, name: str):
    for _block, _i, s in ir.iter_statements(fn.body):
        if isinstance(s, kind) and s.name == name:
            return s
    return None


@CONTROL.lowers("ret")
def lower_ret(cx: FunctionLowering, ins: ir.Instruction) -> None:
    cx.emit("ret", [])


@CONTROL.lowers("exit")
def lower_exit(cx: FunctionLowering, ins: ir.Instruction) -> None:
    cx.emit("exit", [])


@CONTROL.lowers("trap")
def lower_trap(cx: FunctionLowering, ins: ir.Instruction) -> None:
    cx.emit("trap", [])


# --------------------------------------------------------------------------- calls


@CONTROL.lowers("call")
def lower_call(cx: FunctionLowering, ins: ir.Instruction) -> None:
    ops = list(ins.operands)
    rets = ops.pop(0).items if ops and isinstance(ops[0], ir.ParenList) else ()
    target = ops.pop(0) if ops else None
    args = ops.pop(0).items if ops and isinstance(ops[0], ir.ParenList) else ()
    if isinstance(target, ir.Register):
        return _indirect_call(cx, target, rets, args, ops)
    if not isinstance(target, ir.Symbol) or ops:
        raise cx.unsupported(f"the call form {ins}")
    try:
        callee = cx.kernel.module.function(target.name)
    except KeyError:
        raise cx.unsupported(f"a call to the undefined function {target.name}") from None
    arg_offsets = [_frame_variable(cx, a) for a in args]
    ret_offsets = [_frame_variable(cx, r) for r in rets]
    if callee.body is None:
        return _builtin(cx, callee, arg_offsets, ret_offsets)
    if len(args) != len(callee.params) or len(rets) != len(callee.return_params or ()):
        raise cx.unsupported(f"a call to {callee.name} with {len(args)} arguments and {len(rets)} results "
                             f"(it takes {len(callee.params)} and returns {len(callee.return_params or ())})")
    frame = cx.kernel.frames[callee.name]
    copies = [(src, frame.offsets[id(p)], min(size, var_size(p)))
              for (src, size), p in zip(arg_offsets, callee.params)]
    program = cx.kernel.program
    pc = cx.emit("call", [], imm=program.add_copy_list(copies))
    cx.kernel.call_fixups.append((pc, callee.name))
    if rets:
        back = [(frame.offsets[id(p)], dst, min(size, var_size(p)))
                for (dst, size), p in zip(ret_offsets, callee.return_params)]
        cx.emit("retcopy", [], imm=program.add_copy_list(back))


def _indirect_call(cx: FunctionLowering, pointer: ir.Register, rets, args, rest) -> None:
    """`call (r), %fn, (a), prototype;`: the prototype (or a .calltargets function) gives
    the parameter layout, which every function shares (parameters first, then results)."""
    if len(rest) != 1 or not isinstance(rest[0], (ir.LabelRef, ir.Symbol)):
        raise cx.unsupported("an indirect call without a prototype or call-target list")
    name = rest[0].name
    proto = _find_statement(cx.fn, ir.CallPrototype, name)
    if proto is not None:
        params, results = list(proto.params), list(proto.return_params or ())
    else:
        targets = _find_statement(cx.fn, ir.CallTargets, name)
        if targets is None or not targets.functions:
            raise cx.unsupported(f"an indirect call through the unknown prototype {name}")
        callee = cx.kernel.module.function(targets.functions[0])
        params, results = list(callee.params), list(callee.return_params or ())
    if len(params) != len(args) or len(results) != len(rets):
        raise cx.unsupported(f"an indirect call whose arguments do not match its prototype {name}")
    layout = FrameLayout()
    param_offsets = [layout.place(p) for p in params]
    result_offsets = [layout.place(p) for p in results]
    arg_vars = [_frame_variable(cx, a) for a in args]
    ret_vars = [_frame_variable(cx, r) for r in rets]
    copies = [(src, dst, min(size, var_size(p))) for (src, size), dst, p in zip(arg_vars, param_offsets, params)]
    program = cx.kernel.program
    cx.emit("call", [cx.reg(pointer)], imm=program.add_copy_list(copies))
    if rets:
        back = [(src, dst, min(size, var_size(p))) for src, (dst, size), p in zip(result_offsets, ret_vars, results)]
        cx.emit("retcopy", [], imm=program.add_copy_list(back))


def _frame_variable(cx: FunctionLowering, op: ir.Operand) -> tuple[int, int]:
    """(frame offset, size) of a call argument or result variable."""
    if not isinstance(op, ir.Symbol):
        raise cx.unsupported(f"the call argument {op} (only .param variables are supported)")
    b = cx.lookup(op.name)
    if b.kind != "frame":
        raise cx.unsupported(f"the call argument {op.name} (not a .param variable of this function)")
    return b.value, var_size(b.decl)


def _builtin(cx: FunctionLowering, callee: ir.Function, args: list[tuple[int, int]],
             rets: list[tuple[int, int]]) -> None:
    if callee.name == "vprintf" and len(args) == 2:
        cx.emit("vprintf", [], imm=args[0][0], imm2=args[1][0], target=rets[0][0] if rets else -1)
        return
    if callee.name == "__assertfail" and len(args) == 5:
        # (message, file, line, function, char size): the handler reads the first four
        # from the frame; their offsets go two to an immediate.
        (message, _), (file, _), (line, _), (function, _) = args[:4]
        cx.emit("assertfail", [], imm=message | file << 32, imm2=line | function << 32)
        return
    if callee.name in HEAP_FUNCTIONS and len(args) == 1 and args[0][1] == 8 and \
            len(rets) == (1 if callee.name == "malloc" else 0) and all(size == 8 for _, size in rets):
        cx.emit(callee.name, [], imm=args[0][0], target=rets[0][0] if rets else -1)
        return
    if callee.name in DEVICE_LAUNCH_CALLS:
        op, sizes = DEVICE_LAUNCH_CALLS[callee.name]
        if tuple(size for _, size in args) == sizes and len(rets) == 1:
            offsets = [offset for offset, _ in args] + [0] * (4 - len(args))
            if op == "cdp.parameter_buffer":     # four arguments: two frame offsets to an immediate
                cx.kernel.launches_kernels = True
                imm, imm2 = offsets[0] | offsets[1] << 32, offsets[2] | offsets[3] << 32
            else:
                imm, imm2 = offsets[0], WRITTEN_INTS.get(callee.name, offsets[1])
            cx.emit(op, [], imm=imm, imm2=imm2, target=rets[0][0])
            return
    raise cx.unsupported(f"a call to the external function {callee.name} (built in: {', '.join(BUILTINS)})")


# --------------------------------------------------------------------------- barriers


@CONTROL.lowers("bar", "barrier")
def lower_barrier(cx: FunctionLowering, ins: ir.Instruction) -> None:
    if ins.has("warp"):
        cx.emit("bar.warp.sync", [NO_SLOT] * MASK + [cx.src(ins.operands[0], "u32")])
        return
    if ins.has("cluster"):
        lower_cluster_barrier(cx, ins)
        return
    ops = list(ins.operands)
    bar = FLAGS["BAR"]
    if ins.has("red"):
        kind = next((k for k in ("popc", "and", "or") if ins.has(k)), None)
        if kind is None or len(ops) not in (3, 4):
            raise cx.unsupported(ins.full_opcode)
        d = cx.dst(ops[0])
        a = cx.src(ops[1], "u32")
        b = cx.src(ops[2], "u32") if len(ops) == 4 else NO_SLOT
        c, negated = cx.predicate(ops[-1])
        flags = bar[kind] << FLAGS["BAR_SHIFT"] | (FLAGS["NEGATE_C"] if negated else 0)
        cx.emit("bar", [a, b, d, c], flags=flags)
        return
    kind = "arrive" if ins.has("arrive") else "sync"
    if not ops or len(ops) > 2 or (kind == "arrive" and len(ops) != 2):
        raise cx.unsupported(ins.full_opcode)
    a = cx.src(ops[0], "u32")
    b = cx.src(ops[1], "u32") if len(ops) == 2 else NO_SLOT
    cx.emit("bar", [a, b], flags=bar[kind] << FLAGS["BAR_SHIFT"])


def lower_cluster_barrier(cx: FunctionLowering, ins: ir.Instruction) -> None:
    """barrier.cluster.arrive / .wait (csrc/src/emulator/cluster_execution.cpp). `.relaxed`
    drops the arrive's release ordering and `.aligned` promises the warp executes it
    together; the interpreter's memory is sequentially consistent and it runs any
    lanes, so both change nothing here."""
    if ins.operands or ins.has("arrive") == ins.has("wait"):
        raise cx.unsupported(ins.full_opcode)
    cx.emit("bar.cluster", [], flags=FLAGS["CLUSTER_WAIT"] if ins.has("wait") else 0)


# --------------------------------------------------------------------------- warp-level


def _with_mask(cx: FunctionLowering, ops: list[int], mask: ir.Operand | None) -> list[int]:
    ops = ops + [NO_SLOT] * (MASK - len(ops))
    return ops + [cx.src(mask, "u32") if mask is not None else NO_SLOT]


@CONTROL.lowers("shfl")
def lower_shfl(cx: FunctionLowering, ins: ir.Instruction) -> None:
    mode = next((m for m in FLAGS["SHFL"] if ins.has(m)), None)
    ops = list(ins.operands)
    synced = ins.has("sync")
    if mode is None or len(ops) != (5 if synced else 4):
        raise cx.unsupported(ins.full_opcode)
    dest = ops[0]
    d, p = (dest.first, dest.second) if isinstance(dest, ir.PredPair) else (dest, ir.Sink())
    slots = [cx.dst(d), cx.dst(p), cx.src(ops[1], "b32"), cx.src(ops[2], "u32"), cx.src(ops[3], "u32")]
    cx.emit("shfl", _with_mask(cx, slots, ops[4] if synced else None),
            flags=FLAGS["SHFL"][mode] << FLAGS["SHFL_SHIFT"])


@CONTROL.lowers("vote")
def lower_vote(cx: FunctionLowering, ins: ir.Instruction) -> None:
    mode = next((m for m in FLAGS["VOTE"] if ins.has(m)), None)
    ops = list(ins.operands)
    synced = ins.has("sync")
    if mode is None or len(ops) != (3 if synced else 2):
        raise cx.unsupported(ins.full_opcode)
    a, negated = cx.predicate(ops[1])
    flags = FLAGS["VOTE"][mode] << FLAGS["VOTE_SHIFT"] | (FLAGS["NEGATE_A"] if negated else 0)
    cx.emit("vote", _with_mask(cx, [cx.dst(ops[0]), a], ops[2] if synced else None), flags=flags)


@CONTROL.lowers("match")
def lower_match(cx: FunctionLowering, ins: ir.Instruction) -> None:
    t = ins.type
    if t not in ("b32", "b64") or len(ins.operands) != 3:
        raise cx.unsupported(ins.full_opcode)
    dest, a, mask = ins.operands
    d, p = (dest.first, dest.second) if isinstance(dest, ir.PredPair) else (dest, ir.Sink())
    flags = FLAGS["MATCH_ALL"] if ins.has("all") else 0
    cx.emit("match", _with_mask(cx, [cx.dst(d), cx.dst(p), cx.src(a, t)], mask), flags=flags,
            size=4 if t == "b32" else 8)


@CONTROL.lowers("redux")
def lower_redux(cx: FunctionLowering, ins: ir.Instruction) -> None:
    op = next((o for o in FLAGS["REDUX"] if ins.has(o)), None)
    t = ins.type
    if op is None or t not in ("u32", "s32", "b32") or len(ins.operands) != 3:
        raise cx.unsupported(ins.full_opcode)
    d, a, mask = ins.operands
    flags = FLAGS["REDUX"][op] << FLAGS["REDUX_SHIFT"] | (FLAGS["REDUX_SIGNED"] if t == "s32" else 0)
    cx.emit("redux", _with_mask(cx, [cx.dst(d), NO_SLOT, cx.src(a, t)], mask), flags=flags)


@CONTROL.lowers("elect")
def lower_elect(cx: FunctionLowering, ins: ir.Instruction) -> None:
    dest, mask = ins.operands
    d, p = (dest.first, dest.second) if isinstance(dest, ir.PredPair) else (ir.Sink(), dest)
    cx.emit("elect", _with_mask(cx, [cx.dst(d), cx.dst(p)], mask))


@CONTROL.lowers("activemask")
def lower_activemask(cx: FunctionLowering, ins: ir.Instruction) -> None:
    cx.emit("activemask", [cx.dst(ins.operands[0])])
