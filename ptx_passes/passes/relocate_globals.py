"""Relocating a module's variables: their storage moves out of the module to
addresses the loader chooses, reached through a table the module holds.

Why: a driver places a module's `.global` and `.const` variables wherever it
likes when it loads the module, and a job holds their addresses (cudart caches
cuModuleGetGlobal's answers, cudaGetSymbolAddress hands them out, kernels get
them as arguments). Storage the loader places itself (tally's cuda backend: a
virtual-memory reservation, tally/backends/cuda_globals.py) can be released and
mapped again at the same address (suspend) and reserved at the same address in
another process (migration). The driver then only ever places the table.

    before                                  after
    .global .align 4 .u32 hits;             .const .align 8 .u64 __tally_global_addresses[2];
    .const .align 4 .f32 coef[4] = {...};
    ...                                     ...
    atom.global.add.u32 %r1, [hits], 1;     ld.const.u64 %tally_hits_0, [__tally_global_addresses];
                                            cvta.to.global.u64 %tally_hits_1, %tally_hits_0;
                                            atom.global.add.u32 %r1, [%tally_hits_1], 1;
    ld.const.f32 %f1, [coef+4];             ld.const.u64 %tally_coef_2, [__tally_global_addresses+8];
                                            cvta.to.global.u64 %tally_coef_3, %tally_coef_2;
                                            ld.global.nc.f32 %f1, [%tally_coef_3+4];
    mov.u64 %rd1, hits;                     (the table load and cvta as above) mov.u64 %rd1, %tally_hits_1;

Each slot holds the variable's generic address (what cuModuleGetGlobal answers).
A variable named as a value or in a state-space-qualified access is its address
in its space: `cvta.to.global` of the slot (a no-op on NVIDIA GPUs, which ptxas
folds away); in a generic access the slot itself. The table is `.const`, so each
slot load is a constant-bank read that ptxas hoists and folds like a kernel
parameter's: kernels gain about one instruction per variable per function.

`.const` variables move too (a job's `__constant__` data and addresses move
with it): once every constant variable lives in global memory, every other
constant-space access in the module reaches relocated data, so `ld.const`
becomes `ld.global.nc` (the read-only data path: the data does not change while
a kernel runs, as constant memory's does not), `cvta.const`/`cvta.to.const`
and `isspacep.const` their global forms. That trades the constant cache's
broadcast for the read-only path's cached load: the one cost this adds to
kernels, only for modules with `__constant__` data (measured: docs/cuda-globals.md).

Refused (PassRefused, the module then loads as it is and its variables stay
where the driver puts them): 32-bit addressing, variables in a function's scope,
texture/sampler/surface references, `__managed__` variables (the job's CPU code
reads them at the driver's address), a `.const` compiler literal next to
`.const` variables that move (constant reads could no longer tell them apart), `.extern` variables (unresolved: a linker's
business), initializers that take the address of a function or of a compiler
literal (the loader writes the initial bytes itself and cannot know where a
driver put those, nor would they be there on another server), debug sections
that name a variable (-G), and a module that already has the table's name.

Only modules with such variables need this: `module_variables(module)` empty means
nothing to do, and the module loads untouched.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir import (Address, Block, Function, Instruction, Module, NameAllocator, Register, Section, SectionData,
                  Symbol, SymbolAddress, InitList, VarDecl, addr, instr, iter_statements, map_operands)
from .errors import PassRefused

VERSION = 1
TABLE = "__tally_global_addresses"
SPACES = ("global", "const")
KEPT_PREFIX = "$"
_REFERENCE_TYPES = ("texref", "samplerref", "surfref")
# Constant-space forms and their global-space replacements, once no constant variable is left.
_CONST_TO_GLOBAL = {"ld": ("global", "nc"), "cvta": ("global",), "isspacep": ("global",)}


@dataclass(frozen=True)
class RelocatedVariable:
    """A variable whose storage the loader places: the table slot holding its address,
    and its original declaration (type, size, alignment, initializer)."""

    name: str
    slot: int
    decl: VarDecl

    @property
    def space(self) -> str:
        return self.decl.space


@dataclass
class Relocation:
    """The rewritten module and what the loader must do for it: place each variable,
    write its initial bytes and store its address at TABLE[slot]."""

    module: Module
    variables: tuple[RelocatedVariable, ...]
    table: str = TABLE


def module_variables(module: Module) -> list[VarDecl]:
    """Module-scope .global/.const variables with storage in this module that relocation
    moves: all but the compiler's own literals (`$str`, printf's format strings), whose
    names no program can spell, so no job asks for their addresses; they are never
    written, so a copy the driver places anew on another server holds the same bytes
    (and device printf keeps reading its format strings where the driver expects them)."""
    return [v for v in module.globals()
            if v.space in SPACES and "extern" not in v.linkage and not v.name.startswith(KEPT_PREFIX)]


def relocate_globals(module: Module) -> Relocation:
    """A rewritten copy of `module` whose variables live outside it (see the module
    docstring); PassRefused with the reason when that cannot be done safely."""
    variables = module_variables(module)
    _refuse_unsafe(module, variables)
    out = module.clone()
    slots = {v.name: RelocatedVariable(v.name, i, v) for i, v in enumerate(variables)}
    has_const = any(v.space == "const" for v in variables)
    for fn in out.functions():
        if fn.body is not None:
            _rewrite_function(fn, out, slots, has_const)
    table = VarDecl("const", "u64", TABLE, align=8, array_dims=(max(len(variables), 1),))
    first = out.items.index(variables[0]) if variables else len(out.items)
    out.items = [i for i in out.items if not (isinstance(i, VarDecl) and i.name in slots)]
    out.items.insert(first, table)
    return Relocation(out, tuple(slots.values()))


# ---------------------------------------------------------------------------- refusals


def _refuse_unsafe(module: Module, variables: list[VarDecl]) -> None:
    reasons = []
    names = {v.name for v in variables}
    if module.address_size != 64:
        reasons.append(f"the module uses {module.address_size or 32}-bit addresses (relocation needs 64)")
    for v in module.globals():
        if v.space in SPACES and "extern" in v.linkage:
            reasons.append(f"{v.name} is an .extern variable defined in another module")
        if v.space in SPACES and v.type in _REFERENCE_TYPES:
            reasons.append(f"{v.name} is a .{v.type}, not memory")
        if v.name in names and "managed" in v.attributes:
            reasons.append(f"{v.name} is __managed__: the job's CPU code reaches it at the address the driver gave it")
        if v.space == "const" and v.name.startswith(KEPT_PREFIX) and any(
                w.space == "const" for w in variables):
            reasons.append(f"compiler literal {v.name} is constant data that stays, and the module's constant "
                           f"variables move to global memory (its constant reads could not tell them apart)")
        for target in _initializer_symbols(v.init):
            if v.name in names and target not in names:
                reasons.append(f"the initializer of {v.name} takes the address of {target}, which stays where "
                               f"the driver puts it (code, or a compiler literal)")
    for fn in module.functions():
        for _b, _i, s in iter_statements(fn.body) if fn.body is not None else ():
            if isinstance(s, VarDecl) and s.space in SPACES:
                reasons.append(f"{fn.name} declares .{s.space} variable {s.name} in its scope")
    for item in module.items:
        if isinstance(item, Section) and names & _section_symbols(item):
            reasons.append(f"debug section {item.name} names a variable (compiled with -G)")
            break
    if any(isinstance(i, (VarDecl, Function)) and i.name == TABLE for i in module.items):
        reasons.append(f"the module already has a symbol named {TABLE}")
    if reasons:
        raise PassRefused(tuple(dict.fromkeys(reasons)))


def _initializer_symbols(init) -> list[str]:
    if isinstance(init, SymbolAddress):
        return [init.name]
    if isinstance(init, InitList):
        return [name for item in init.items for name in _initializer_symbols(item)]
    return []


def _section_symbols(section: Section) -> set[str]:
    found = set()
    for entry in section.entries:
        if isinstance(entry, SectionData):
            for value in entry.values:
                found.add(value.split("+")[0].strip())
    return found


# ---------------------------------------------------------------------------- rewriting


def _rewrite_function(fn: Function, module: Module, slots: dict[str, RelocatedVariable], has_const: bool) -> None:
    # Registers first: declaring them shifts the body's statements, so the edits are
    # collected only afterwards. Per variable, (generic address, global-space address),
    # loaded again before each use so they never live across code they did not see.
    used_here: list[str] = []
    for _block, _index, statement in iter_statements(fn.body):
        if isinstance(statement, Instruction):
            used_here += [n for n in _relocated_symbols(statement, slots) if n not in used_here]
    names = NameAllocator(fn, module)
    registers = {name: (names.new_register("u64", name), names.new_register("u64", name)) for name in used_here}

    edits: list[tuple[Block, int, list[Instruction], Instruction]] = []
    for block, index, statement in list(iter_statements(fn.body)):
        if not isinstance(statement, Instruction):
            continue
        ins = _const_to_global(statement) if has_const else statement
        used = _relocated_symbols(ins, slots)
        if not used and ins is statement:
            continue
        prelude: list[Instruction] = []
        for name in used:
            generic, global_space = registers[name]
            prelude.append(instr("ld.const.u64", generic, addr(TABLE, 8 * slots[name].slot)))
            prelude.append(instr("cvta.to.global.u64", global_space, generic))
        edits.append((block, index, prelude, _substitute(ins, slots, registers)))
    # From the highest index down, so the indices still to edit stay valid.
    for block, index, prelude, ins in reversed(edits):
        block.statements[index:index + 1] = prelude + [ins]


def _const_to_global(ins: Instruction) -> Instruction:
    if "const" not in ins.modifiers:
        return ins
    if ins.opcode not in _CONST_TO_GLOBAL:
        raise PassRefused(f"{ins.full_opcode} reaches constant memory, which relocation moves to global memory, "
                          f"and has no global form here")
    if ins.opcode == "ld" and any(isinstance(op, Address) and op.base is None for op in ins.operands):
        raise PassRefused(f"`{ins}` reads an absolute constant-bank address")
    modifiers: list[str] = []
    for m in ins.modifiers:
        modifiers.extend(_CONST_TO_GLOBAL[ins.opcode] if m == "const" else (m,))
    return replace(ins, modifiers=tuple(modifiers))


def _relocated_symbols(ins: Instruction, slots: dict[str, RelocatedVariable]) -> list[str]:
    found: list[str] = []

    def visit(op):
        if isinstance(op, Symbol) and op.name in slots and op.name not in found:
            found.append(op.name)
        return op

    map_operands(ins, visit)
    return found


def _substitute(ins: Instruction, slots: dict[str, RelocatedVariable],
                registers: dict[str, tuple[Register, Register]]) -> Instruction:
    """`ins` with each relocated variable replaced by the register holding its address:
    the generic one inside a generic access, the global-space one everywhere else."""
    generic_access = ins.state_space is None

    def address(op: Address) -> Address:
        if isinstance(op.base, Symbol) and op.base.name in slots:
            generic, global_space = registers[op.base.name]
            return Address(generic if generic_access else global_space, op.offset, op.coordinates,
                           op.zero_offset_written)
        return op

    operands = []
    for op in ins.operands:
        if isinstance(op, Address):
            operands.append(address(op))
        else:
            operands.append(_map_values(op, slots, registers))
    return replace(ins, operands=tuple(operands))


def _map_values(op, slots, registers):
    """Plain operands (vectors and call lists included): a variable names its address in its space."""
    def value(o):
        if isinstance(o, Symbol) and o.name in slots:
            return registers[o.name][1]
        return o
    return map_operands(Instruction("mov", (), (op,)), value).operands[0]
