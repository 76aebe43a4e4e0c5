"""Lowering: a kernel of the PTX IR (ptx_passes.ir) and the functions it calls
become one `tally._core.emulator.Program`, the pre-decoded instruction array the
C++ interpreter runs.

    kernel = lower_kernel(module_ir, "vector_add", global_addresses)
    kernel.program     # Program (entry at pc 0, callees after it)

What lowering decides:
- registers: every `.reg` name of a function gets a slot of its call frame
  (names are scoped: inline-asm blocks may redeclare `p`); a frame has as many
  slots as the largest function needs.
- literals, resolved symbol addresses: slots of the program's constant bank;
  special registers: slots of the per-warp bank, filled at block start.
- symbols: .global/.const variables are device addresses (allocated when the
  module loaded); .shared ones offsets in the block's shared memory (static
  variables of every reachable function first, `extern .shared` after them);
  kernel parameters offsets in the launch's parameter buffer; function
  parameters, return values, call arguments and .local arrays offsets in the
  call frame's local memory.
- calls copy argument bytes into the callee's frame; a `retcopy` after the call
  copies return values back.
Anything the interpreter has no handler for raises LoweringError naming the
instruction and its PTX line.
"""
from __future__ import annotations

from dataclasses import dataclass

from ptx_passes import ir
from tally.backends.emulator import lower_async_copy, lower_compute, lower_control, lower_mbarrier, lower_memory
from tally.backends.emulator import lower_matrix_fragments, lower_matrix_multiply, lower_wmma
from tally.backends.emulator import lower_texture, lower_video
from tally.backends.emulator.context import FunctionLowering, KernelLowering, Lowerers, LoweringError
from tally.backends.emulator.layout import DYNAMIC_SHARED_ALIGN, LayoutError

# Every instruction the emulator runs, by opcode: the families' tables, joined here.
LOWERERS = Lowerers.join(lower_compute.COMPUTE, lower_control.CONTROL, lower_memory.MEMORY,
                         lower_mbarrier.MBARRIER, lower_async_copy.ASYNC_COPY,
                         lower_matrix_fragments.MATRIX_FRAGMENTS, lower_matrix_multiply.MATRIX_MULTIPLY,
                         lower_texture.TEXTURE, lower_video.VIDEO, lower_wmma.WMMA)


@dataclass
class LoweredKernel:
    name: str
    program: object          # tally._core.emulator.Program
    param_bytes: int
    static_shared_bytes: int


def _lower(kernel: KernelLowering) -> LoweredKernel:
    """Lowers every function the kernel reaches into its program."""
    frame_registers = 0
    frame_bytes = 0
    for fn in kernel.functions:
        if fn.body is None:
            continue  # extern declarations (vprintf) are built in; calls check
        if fn.is_entry and fn is not kernel.entry:
            # Another kernel whose address the kernel takes (a device-side launch, a
            # table of them): it runs as its own launch, never in this program.
            continue
        kernel.function_pcs[fn.name] = len(kernel.program)
        lowering = FunctionLowering(kernel, fn, kernel.frames[fn.name])
        lower_function_body(lowering)
        frame_registers = max(frame_registers, lowering.registers)
        frame_bytes = max(frame_bytes, lowering.frame.size)
    p = kernel.finish(frame_registers, frame_bytes)
    return LoweredKernel(kernel.entry.name, p, p.param_bytes, kernel.shared.static_bytes)


def lower_function_body(lowering: FunctionLowering) -> None:
    fn = lowering.fn
    _lower_block(lowering, fn.body)
    # A body that runs off its end returns (nvcc always ends with ret; be safe).
    lowering.ins = None
    lowering.emit("ret", [])
    for pc, label in lowering.label_fixups:
        target = lowering.labels.get(label)
        if target is None:
            raise LoweringError(f"branch to the undefined label {label.split('#')[0]} in {fn.name}")
        lowering.kernel.program.patch_target(pc, target)
    for table, labels in lowering.jump_table_fixups:
        missing = [label.split("#")[0] for label in labels if label not in lowering.labels]
        if missing:
            raise LoweringError(f"brx.idx targets undefined labels {', '.join(missing)} in {fn.name}")
        lowering.kernel.program.set_jump_table(table, [lowering.labels[label] for label in labels])


def _lower_block(lowering: FunctionLowering, block: ir.Block) -> None:
    lowering.scopes.append({})
    lowering.open_label_scope([s.name for s in block.statements if isinstance(s, ir.Label)])
    try:
        for s in block.statements:
            if isinstance(s, ir.Instruction):
                lowering.ins = s
                try:
                    _lower_instruction(lowering, s)
                except LoweringError as e:
                    if lowering.kernel.collect is None:
                        raise
                    lowering.kernel.collect.append(e)
            elif isinstance(s, ir.RegDecl):
                if s.vector:
                    raise LoweringError(f"vector registers (.v{s.vector} {s.name}) are not supported by the emulator")
                for name in s.names():
                    lowering.declare_register(name, s.type)
            elif isinstance(s, ir.VarDecl):
                try:
                    lowering.declare_variable(s)
                except LayoutError as e:
                    raise LoweringError(f"{e} (in {lowering.fn.name})") from None
            elif isinstance(s, ir.Label):
                lowering.labels[lowering.label_scopes[-1][s.name]] = len(lowering.kernel.program)
            elif isinstance(s, ir.Block):
                _lower_block(lowering, s)
            # Pragma, Loc, BranchTargets, CallTargets, CallPrototype: nothing to run
    finally:
        lowering.scopes.pop()
        lowering.label_scopes.pop()


def _lower_instruction(lowering: FunctionLowering, s: ir.Instruction) -> None:
    lowerer = LOWERERS.get(s.opcode)
    if lowerer is None:
        raise lowering.unsupported(f"the instruction {s.full_opcode}")
    try:
        lowerer(lowering, s)
    except (ValueError, TypeError, IndexError, AttributeError) as e:
        # operand counts/kinds a valid PTX instruction of this form cannot have
        raise lowering.unsupported(f"{s.full_opcode} with these operands ({type(e).__name__}: {e})") from None


def lower_kernel(module: ir.Module, name: str, global_addresses: dict[str, int],
                 collect: list[LoweringError] | None = None) -> LoweredKernel:
    """Lowers kernel `name` of `module`; raises LoweringError for what the emulator cannot run.
    With `collect`, unsupported instructions are appended to it and lowering goes on
    (the program is then not runnable: for counting what is missing)."""
    try:
        entry = module.function(name)
    except KeyError:
        raise LoweringError(f"no kernel named {name!r} in the module") from None
    if not entry.is_entry or entry.body is None:
        raise LoweringError(f"{name!r} is not a kernel with a body")
    try:
        return _lower(KernelLowering(module, entry, global_addresses, collect))
    except LayoutError as e:
        raise LoweringError(f"{e} (kernel {name})") from None


__all__ = ["DYNAMIC_SHARED_ALIGN", "LoweredKernel", "LoweringError", "lower_kernel"]
