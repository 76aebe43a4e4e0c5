"""The state of lowering a kernel (KernelLowering: the program being built,
constants, special registers, shared layout, module symbols) and one function
of it (FunctionLowering: scoped names, operand slots, address resolution, and
`emit`, which appends one interpreter instruction with the current PTX
instruction's guard, line and text).

Instruction lowerers (lower_compute.py, lower_memory.py, lower_control.py)
receive a FunctionLowering and the IR instruction; each of those modules keeps
its own table of them by opcode (Lowerers), which lowering.py joins. Nothing
here knows the lowerers.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ptx_passes import ir
from ptx_passes.params import param_bytes, param_layout
from tally._core import emulator as core
from tally.backends.device_attributes import RESERVED_SHARED_MEMORY_PER_BLOCK
from tally.backends.emulator.layout import (
    FrameLayout,
    align_up,
    float_bits,
    function_frame,
    function_indices,
    reachable_functions,
    shared_layout,
)

NO_SLOT = core.NO_SLOT
FLAGS = core.FLAGS
FLOAT_TYPES = frozenset({"f16", "bf16", "f32", "f64", "f16x2", "bf16x2"})
DYNAMIC_SPECIALS = {"%clock": "clock", "%clock64": "clock64", "%globaltimer": "globaltimer"}
# Constants PTX names as operands (`mov.u32 %r1, WARP_SZ;` is what nvcc emits for warpSize).
PTX_CONSTANTS = {"WARP_SZ": core.WARP_SIZE}

Lowerer = Callable[["FunctionLowering", ir.Instruction], None]


class Lowerers(dict[str, Lowerer]):
    """Instruction lowerers by PTX opcode. Each family module fills its own table
    with `@TABLE.lowers("add", "sub")`; lowering.py joins the families' tables."""

    def lowers(self, *opcodes: str) -> Callable[[Lowerer], Lowerer]:
        def register(fn: Lowerer) -> Lowerer:
            for op in opcodes:
                if op in self:
                    raise ValueError(f"two lowerers for {op}: {self[op].__name__} and {fn.__name__}")
                self[op] = fn
            return fn
        return register

    @classmethod
    def join(cls, *tables: Lowerers) -> Lowerers:
        joined = cls()
        for table in tables:
            for op, fn in table.items():
                joined.lowers(op)(fn)
        return joined


class LoweringError(Exception):
    """A PTX construct the emulator cannot run; names the instruction and its line.
    `construct` is what is missing, without where (for tools that count them)."""

    def __init__(self, message: str, line: int = 0, text: str = "", construct: str = ""):
        text = " ".join(text.split())
        where = f" (PTX line {line}: `{text}`)" if line else (f" (`{text}`)" if text else "")
        super().__init__(message + where)
        self.line = line
        self.text = text
        self.construct = construct or message


@dataclass(frozen=True)
class Binding:
    """What a name means in a scope. kind: reg (value = slot), frame (offset in
    the call frame), shared (offset), global (device address), param (offset in
    the kernel's parameter buffer), function."""

    kind: str
    value: int
    decl: object = None


DEFAULT_MAX_CALL_DEPTH = 64
# Special registers that describe the block's reserved shared memory: a kernel that
# reads one gets the region (csrc/src/emulator/emu_types.h, Special).
RESERVED_SHARED_SPECIALS = frozenset({
    "%reserved_smem_offset_begin", "%reserved_smem_offset_end", "%reserved_smem_offset_cap",
    "%reserved_smem_offset_0", "%reserved_smem_offset_1", "%aggr_smem_size"})


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
        self.launches_kernels = False     # it reaches a device-side launch (lower_control.py)
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

    def finish(self, frame_registers: int, frame_bytes: int) -> object:
        """The program, once every function is lowered: calls linked, sizes set."""
        for pc, name in self.call_fixups:
            self.program.patch_target(pc, self.function_pcs[name])
        self.program.set_function_table([self.function_pcs.get(name, -1) for name in self.function_index])
        if self.launches_kernels:
            kernels = {f.name: f for f in self.module.entries()}
            self.program.set_kernel_param_bytes([param_bytes(kernels[name]) if name in kernels else -1
                                                 for name in self.function_index])
        p = self.program
        p.frame_registers = frame_registers
        p.warp_slots = len(self._specials)
        p.local_frame_bytes = align_up(frame_bytes, 16)
        p.static_shared_bytes = self.shared.dynamic_offset if self.shared.static_bytes else 0
        p.reserved_shared_bytes = self.reserved_shared_bytes
        p.param_bytes = param_bytes(self.entry)
        p.entry_pc = 0
        p.max_call_depth = DEFAULT_MAX_CALL_DEPTH
        return p


class FunctionLowering:
    def __init__(self, kernel: KernelLowering, fn: ir.Function, frame: FrameLayout):
        self.kernel = kernel
        self.fn = fn
        self.frame = frame
        self.scopes: list[dict[str, Binding]] = []
        self.registers = 0
        # Labels are scoped like registers: one declared inside a `{ }` block (inline asm
        # blocks each declare their own LAB_WAIT / DONE) is seen only there and shadows
        # outer ones. label_scopes maps the names a block declares to keys unique in the
        # function; labels and the fixups are by key.
        self.label_scopes: list[dict[str, str]] = []
        self.labels: dict[str, int] = {}
        self.label_fixups: list[tuple[int, str]] = []
        self._label_blocks = 0          # nested blocks that declared labels so far (keys' suffix)
        self.jump_table_fixups: list[tuple[int, tuple[str, ...]]] = []
        self.ins: ir.Instruction | None = None
        self._carry_slot: int | None = None
        outer: dict[str, Binding] = {}
        if fn.is_entry:
            for p, offset in zip(fn.params, kernel.param_offsets):
                outer[p.name] = Binding("param", offset, p)
        else:
            for p in list(fn.params) + list(fn.return_params or ()):
                outer[p.name] = Binding("frame", frame.offsets[id(p)], p)
        self.scopes.append(outer)

    # ------------------------------------------------------------------ errors

    def unsupported(self, what: str) -> LoweringError:
        ins = self.ins
        return LoweringError(f"the emulator does not support {what} in {self.fn.name}",
                             ins.line if ins else 0, str(ins) if ins else "", construct=what)

    # ------------------------------------------------------------------ names

    def lookup(self, name: str) -> Binding:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        found = self.kernel.module_binding(name)
        if found is None:
            raise self.unsupported(f"the undeclared name {name!r}")
        return found

    def declare_register(self, name: str, type_name: str) -> None:
        self.scopes[-1][name] = Binding("reg", self.registers, type_name)
        self.registers += 1

    def register_type(self, op: ir.Register) -> str | None:
        b = self.lookup(op.name)
        return b.decl if b.kind == "reg" else None

    def declare_variable(self, decl: ir.VarDecl) -> None:
        space = decl.space
        if space in ("local", "param", "param::func"):
            self.scopes[-1][decl.name] = Binding("frame", self.frame.place(decl), decl)
        elif space.startswith("shared"):
            self.scopes[-1][decl.name] = Binding("shared", self.kernel.shared.offsets[id(decl)], decl)
        elif space in ("global", "const"):
            self.scopes[-1][decl.name] = Binding("global", self.kernel.function_global(decl), decl)
        else:
            raise LoweringError(f"the emulator does not support .{space} variables ({decl.name} in {self.fn.name})")

    def temp(self) -> int:
        """A fresh hidden register of this function."""
        slot = self.registers
        self.registers += 1
        return slot

    def carry_slot(self) -> int:
        """The hidden CC.CF register of add.cc/addc chains."""
        if self._carry_slot is None:
            self._carry_slot = self.temp()
        return self._carry_slot

    def open_label_scope(self, names: list[str]) -> None:
        """Labels a block declares (called before lowering the block)."""
        nested = bool(self.label_scopes)     # the function's own block keeps the plain names
        if nested and names:
            self._label_blocks += 1
        self.label_scopes.append({n: f"{n}#{self._label_blocks}" if nested else n for n in names})

    def label_key(self, name: str) -> str:
        """The key of the label `name` as seen from where lowering is (innermost scope first)."""
        for scope in reversed(self.label_scopes):
            if name in scope:
                return scope[name]
        return name   # undefined: the fixup reports it

    # ------------------------------------------------------------------ operands

    def reg(self, op: ir.Register) -> int:
        b = self.lookup(op.name)
        if b.kind != "reg":
            raise self.unsupported(f"{op.name} used as a register")
        return b.value

    def dst(self, op: ir.Operand) -> int:
        """Slot of a destination register (NO_SLOT for `_`)."""
        if isinstance(op, ir.Sink):
            return NO_SLOT
        if isinstance(op, ir.Register):
            return self.reg(op)
        raise self.unsupported(f"the destination operand {op}")

    def const(self, value: int) -> int:
        return self.kernel.constant(value)

    def src(self, op: ir.Operand, type_name: str | None = None) -> int:
        """Slot holding a source operand's value; `type_name` chooses how a literal is encoded."""
        if isinstance(op, ir.Register):
            return self.reg(op)
        if isinstance(op, ir.Immediate):
            return self.const(self.immediate(op, type_name))
        if isinstance(op, ir.SpecialReg):
            return self.special(op)
        if isinstance(op, ir.Symbol):
            if op.name in PTX_CONSTANTS:
                return self.const(PTX_CONSTANTS[op.name])
            return self.symbol_value(op.name)
        raise self.unsupported(f"the operand {op}")

    def immediate(self, op: ir.Immediate, type_name: str | None) -> int:
        if type_name in FLOAT_TYPES - {"f16x2", "bf16x2"}:
            return float_bits(op.value, op.text, type_name)
        if op.is_float or op.text.lower().startswith(("0f", "0d")):
            return float_bits(op.value, op.text, "f64" if op.text.lower().startswith("0d") else "f32")
        return int(op.value) & 0xFFFF_FFFF_FFFF_FFFF

    def special(self, op: ir.SpecialReg) -> int:
        name = str(op)
        if op.name in DYNAMIC_SPECIALS or name in ("%globaltimer_lo", "%globaltimer_hi"):
            slot = self.temp()
            kind = "globaltimer" if name.startswith("%globaltimer") else DYNAMIC_SPECIALS[op.name]
            self.emit("clock", [slot], flags=FLAGS["CLOCK"][kind] << FLAGS["CLOCK_SHIFT"])
            if name == "%globaltimer_hi":
                self.emit("shr.u64", [slot, slot, self.const(32)])
            return slot
        if name not in core.SPECIALS:
            raise self.unsupported(f"the special register {name}")
        return self.kernel.special_slot(name)

    def symbol_value(self, name: str, generic: bool = False) -> int:
        """Slot holding the address of a variable (in its own space, or generic)."""
        b = self.lookup(name)
        if b.kind == "global":
            return self.const(b.value)
        if b.kind == "shared":
            return self.const(b.value + (core.SHARED_WINDOW if generic else 0))
        if b.kind == "param":
            return self.const(b.value + (core.PARAM_WINDOW if generic else 0))
        if b.kind == "frame":
            slot = self.temp()
            self.emit("localaddr.generic" if generic else "localaddr", [slot], imm=b.value)
            return slot
        if b.kind == "reg":
            return b.value
        if b.kind == "function":
            return self.kernel.function_pointer(name)
        raise self.unsupported(f"taking the address of {name}")

    def predicate(self, op: ir.Operand) -> tuple[int, bool]:
        """(slot, negated) of a predicate source: %p, !%p or a literal."""
        if isinstance(op, ir.Negated):
            return self.reg(op.register), True
        return self.src(op, "pred"), False

    # ------------------------------------------------------------------ memory operands

    def address(self, op: ir.Operand, space: str | None) -> tuple[str, int, int]:
        """(space key, base slot, offset) of a memory operand for an instruction
        whose state space is `space` (None: generic addressing)."""
        if not isinstance(op, ir.Address):
            raise self.unsupported(f"the memory operand {op}")
        if op.coordinates is not None:
            raise self.unsupported("texture/tensor coordinates")
        space = normalize_space(space)
        if op.base is None:
            return self._register_space(space), self.const(0), op.offset
        if isinstance(op.base, ir.Register):
            return self._register_space(space), self.reg(op.base), op.offset
        b = self.lookup(op.base.name)
        zero = self.const(0)
        if b.kind == "global":
            return ("global" if space in ("global", "generic") else self._register_space(space)), zero, b.value + op.offset
        if b.kind == "shared":
            return "shared", zero, b.value + op.offset
        if b.kind == "param":
            return "param", zero, b.value + op.offset
        if b.kind == "frame":
            return "frame", zero, b.value + op.offset
        if b.kind == "reg":
            return self._register_space(space), b.value, op.offset
        raise self.unsupported(f"the memory operand {op}")

    def address_slot(self, op: ir.Operand, space: str | None) -> int:
        """Slot holding a memory operand's whole address (base + offset) in `space`."""
        _, base, offset = self.address(op, space)
        if offset == 0:
            return base
        slot = self.temp()
        self.emit("add.u64", [slot, base, self.const(offset)])
        return slot

    def _register_space(self, space: str) -> str:
        if space == "param" and not self.fn.is_entry:
            raise self.unsupported("a .param access through a register inside a .func")
        return space

    # ------------------------------------------------------------------ output

    def emit(self, key: str, ops: list[int], *, imm: int = 0, imm2: int = 0, target: int = -1,
             flags: int = 0, width: int = 1, size: int = 0, label: str | None = None,
             guarded: bool = True) -> int:
        """Appends an instruction; returns its pc. `label` asks for the target to be
        patched to that label's pc once the function is done."""
        ins = self.ins
        guard, negated = NO_SLOT, False
        if guarded and ins is not None and ins.guard is not None:
            guard, negated = self.reg(ins.guard.register), ins.guard.negated
        program = self.kernel.program
        pc = len(program)
        text = " ".join(str(ins).split()) if ins else key
        ok = program.add(key, [(o & 0xFFFF_FFFF) for o in ops], imm=_signed64(imm), imm2=_signed64(imm2),
                         target=target, guard=guard, guard_negated=negated, flags=flags, width=width,
                         size=size, line=ins.line if ins else 0, text=text)
        if not ok:
            raise self.unsupported(f"the instruction form {key!r}")
        if label is not None:
            self.label_fixups.append((pc, self.label_key(label)))
        return pc


def normalize_space(space: str | None) -> str:
    if space is None:
        return "generic"
    if space.startswith("shared"):
        return "shared"
    if space.startswith("param"):
        return "param"
    if space == "const":
        return "global"
    return space


def _signed64(v: int) -> int:
    v &= 0xFFFF_FFFF_FFFF_FFFF
    return v - (1 << 64) if v >= 1 << 63 else v
