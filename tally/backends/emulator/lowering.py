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
from ptx_passes.params import param_bytes, param_layout
from tally._core import emulator as core
from tally.backends.device_attributes import RESERVED_SHARED_MEMORY_PER_BLOCK
from tally.backends.emulator import lower_compute, lower_control, lower_memory  # noqa: F401  (register lowerers)
from tally.backends.emulator.context import LOWERERS, Binding, FunctionLowering, LoweringError
from tally.backends.emulator.layout import (
    DYNAMIC_SHARED_ALIGN,
    FrameLayout,
    LayoutError,
    align_up,
    function_frame,
    function_indices,
    reachable_functions,
    shared_layout,
)

DEFAULT_MAX_CALL_DEPTH = 64
# Special registers that describe the block's reserved shared memory: a kernel that
# reads one gets the region (csrc/src/emulator/emu_types.h, Special).
RESERVED_SHARED_SPECIALS = frozenset({
    "%reserved_smem_offset_begin", "%reserved_smem_offset_end", "%reserved_smem_offset_cap",
    "%reserved_smem_offset_0", "%reserved_smem_offset_1", "%aggr_smem_size"})


@dataclass
class LoweredKernel:
    name: str
    program: object          # tally._core.emulator.Program
    param_bytes: int
    static_shared_bytes: int


class KernelLowering:
    """Kernel-wide state: the program being built, constants, special-register
    slots, the shared layout, module symbols and where each function starts."""

    def __init__(self, module: ir.Module, entry: ir.Function, global_addresses: dict[str, int],
                 collect: list[LoweringError] | None = None):
        self.module = module
        # Where unsupported instructions go instead of ending the lowering (tools/ptx_sweep.py).
        self.collect = collect
        self.entry = entry
        self.global_addresses = global_addresses
        self.program = core.Program(entry.name)
        self.functions = reachable_functions(module, entry)
        self.shared = shared_layout(module, self.functions)
        self.param_offsets = [slot.offset for slot in param_layout(entry)]
        self._constants: dict[int, int] = {}
        self._specials: dict[str, int] = {}
        self.reserved_shared_bytes = 0
        self.frames: dict[str, FrameLayout] = {fn.name: function_frame(fn) for fn in self.functions}
        self.function_pcs: dict[str, int] = {}
        self.call_fixups: list[tuple[int, str]] = []
        self.function_index = function_indices(module)
        self._module_scope: dict[str, Binding] = {}
        for g in module.globals():
            if g.space in ("global", "const") and g.name in global_addresses:
                self._module_scope[g.name] = Binding("global", global_addresses[g.name], g)
            elif g.space.startswith("shared") and id(g) in self.shared.offsets:
                self._module_scope[g.name] = Binding("shared", self.shared.offsets[id(g)], g)
        for f in module.functions():
            self._module_scope.setdefault(f.name, Binding("function", 0, f))

    def module_binding(self, name: str) -> Binding | None:
        return self._module_scope.get(name)

    def function_global(self, decl: ir.VarDecl) -> int:
        """Address of a .global/.const variable declared inside a function (allocated at load)."""
        address = self.global_addresses.get(f"{decl.name}")
        if address is None:
            raise LoweringError(f"the function-scope variable {decl.name} has no storage")
        return address

    def constant(self, value: int) -> int:
        value &= 0xFFFF_FFFF_FFFF_FFFF
        slot = self._constants.get(value)
        if slot is None:
            slot = self.program.add_constant(value)
            self._constants[value] = slot
        return slot

    def function_pointer(self, name: str) -> int:
        """Slot holding the function's pointer: CODE_WINDOW + its index in the module."""
        return self.constant(core.CODE_WINDOW + self.function_index[name])

    def special_slot(self, name: str) -> int:
        slot = self._specials.get(name)
        if slot is None:
            slot = (core.BANK_WARP << core.BANK_SHIFT) | len(self._specials)
            self.program.add_special(slot, core.SPECIALS[name])
            self._specials[name] = slot
            if name in RESERVED_SHARED_SPECIALS:
                self.reserved_shared_bytes = RESERVED_SHARED_MEMORY_PER_BLOCK
        return slot

    def run(self) -> LoweredKernel:
        frame_registers = 0
        frame_bytes = 0
        for fn in self.functions:
            if fn.body is None:
                continue  # extern declarations (vprintf) are built in; calls check
            self.function_pcs[fn.name] = len(self.program)
            lowering = FunctionLowering(self, fn, self.frames[fn.name])
            lower_function_body(lowering)
            frame_registers = max(frame_registers, lowering.registers)
            frame_bytes = max(frame_bytes, lowering.frame.size)
        for pc, name in self.call_fixups:
            self.program.patch_target(pc, self.function_pcs[name])
        self.program.set_function_table([self.function_pcs.get(name, -1) for name in self.function_index])
        p = self.program
        p.frame_registers = frame_registers
        p.warp_slots = len(self._specials)
        p.local_frame_bytes = align_up(frame_bytes, 16)
        p.static_shared_bytes = self.shared.dynamic_offset if self.shared.static_bytes else 0
        p.reserved_shared_bytes = self.reserved_shared_bytes
        p.param_bytes = param_bytes(self.entry)
        p.entry_pc = 0
        p.max_call_depth = DEFAULT_MAX_CALL_DEPTH
        return LoweredKernel(self.entry.name, p, p.param_bytes, self.shared.static_bytes)


def lower_function_body(lowering: FunctionLowering) -> None:
    fn = lowering.fn
    _lower_block(lowering, fn.body)
    # A body that runs off its end returns (nvcc always ends with ret; be safe).
    lowering.ins = None
    lowering.emit("ret", [])
    for pc, label in lowering.label_fixups:
        target = lowering.labels.get(label)
        if target is None:
            raise LoweringError(f"branch to the undefined label {label} in {fn.name}")
        lowering.kernel.program.patch_target(pc, target)
    for table, labels in lowering.jump_table_fixups:
        missing = [label for label in labels if label not in lowering.labels]
        if missing:
            raise LoweringError(f"brx.idx targets undefined labels {', '.join(missing)} in {fn.name}")
        lowering.kernel.program.set_jump_table(table, [lowering.labels[label] for label in labels])


def _lower_block(lowering: FunctionLowering, block: ir.Block) -> None:
    lowering.scopes.append({})
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
                lowering.labels[s.name] = len(lowering.kernel.program)
            elif isinstance(s, ir.Block):
                _lower_block(lowering, s)
            # Pragma, Loc, BranchTargets, CallTargets, CallPrototype: nothing to run
    finally:
        lowering.scopes.pop()


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
        return KernelLowering(module, entry, global_addresses, collect).run()
    except LayoutError as e:
        raise LoweringError(f"{e} (kernel {name})") from None


__all__ = ["DYNAMIC_SHARED_ALIGN", "LoweredKernel", "LoweringError", "lower_kernel"]
