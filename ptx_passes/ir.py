"""The PTX IR: what the parser builds, the passes rewrite, the printer prints and
the emulator executes.

Two kinds of node:

* Values (frozen dataclasses, hashable, compared by value): every operand,
  `Guard`, `Instruction`, `Param`, declarations and directives. A pass never
  edits one in place; it builds a new one (`dataclasses.replace` or the
  builders at the end of this file).
* Containers (ordinary dataclasses with lists, compared by value): `Module`,
  `Function`, `Block`. Passes insert, remove and replace statements and
  parameters in those lists. `clone()` copies the containers (values are
  shared, being immutable) when the original must survive.

So `parse(print(parse(x))) == parse(x)` is a plain `==`.

Spelling conventions
--------------------
* Directive, type, state-space and modifier names are stored WITHOUT the
  leading dot: `Instruction("ld", ("global", "nc", "v4", "f32"), ...)`,
  `RegDecl("b32", "%r", 12)`, `VarDecl(space="shared", type="b8", ...)`.
* Names keep their PTX spelling, `%` included: `Register("%r1")`,
  `Register("p")` (a register declared in an inline-asm scope),
  `SpecialReg("%ctaid", "x")`, `Symbol("_Z3fooPf_param_0")`, `LabelRef("$L__BB0_2")`.
* `Immediate.text` is the literal as written (`0f3F800000`, `0x1F`, `-8`, `1U`);
  `Immediate.value` is its value (int or float) and is not part of equality
  (NaN payloads would otherwise make a node unequal to itself).

What the parser decides for you
-------------------------------
* An identifier operand is a `Register` if a `.reg` declaration in an
  enclosing scope (or any `%name` that is not a special register) names it,
  a `LabelRef` if it is a label (or `.branchtargets`/`.callprototype`/
  `.calltargets` name) of the same function, else a `Symbol` (variables,
  parameters, functions).
* `%r<12>` is one `RegDecl(type, "%r", 12)` and declares `%r0` .. `%r11`.
* Statements that declare several names (`.reg .pred p, q;`) become one
  declaration per name.
* Comments are not kept. `.loc`, `.file`, `.section` and `.pragma` are kept
  (`Loc`, `FileDirective`, `Section`, `Pragma`) so `-lineinfo` and `-G` PTX
  print back equivalently.
* `Instruction.line` is the source line (0 for built instructions); it is
  not part of equality.

Destinations and sources (`Instruction.defs()` / `.uses()`)
-----------------------------------------------------------
The first operand is the destination, unless
  1. the opcode (or opcode.first-modifier) is in `NO_DESTINATION_OPCODES`
     (except barrier reductions, `bar.red`/`barrier.red`, which write theirs):
     bra, brx, call, ret, exit, trap, brkpt, bar, barrier, membar, fence,
     red, st, prefetch, prefetchu, nanosleep, pmevent, griddepcontrol,
     setmaxnreg, cp, stmatrix, sust, sured, applypriority, discard,
     stackrestore, mbarrier.init/inval/expect_tx and
     wgmma.fence/commit_group/wait_group; or
  2. the first operand is an `Address` (a memory destination: st-like forms
     of any opcode).
A destination operand defines every register in it: `%p|%q` pairs define
both, vectors define their register elements (`_` sinks define nothing).
Registers inside a destination `Address` (`[%rd1]`) are uses. `uses()` is
every other register: sources, address bases, vector elements, negated
predicates, the guard predicate, and the destination too for the
read-modify-write opcodes in `READ_MODIFY_WRITE_OPCODES` (wgmma.mma_async's
accumulator). `call` defines no register: results come back through
`.param` symbols read by `ld.param` after the call.
"""
from __future__ import annotations

import itertools
import re
import struct
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Union

# --------------------------------------------------------------------------- operands


@dataclass(frozen=True, slots=True)
class Register:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class SpecialReg:
    """A read-only special register: `%tid.x` is SpecialReg("%tid", "x"), `%laneid` has component None."""

    name: str
    component: str | None = None

    def __str__(self) -> str:
        return self.name if self.component is None else f"{self.name}.{self.component}"


@dataclass(frozen=True, slots=True)
class Immediate:
    """A literal. `text` is the spelling (kept for faithful printing), `value` its number."""

    text: str
    value: int | float = field(compare=False, default=0)

    @property
    def is_float(self) -> bool:
        return isinstance(self.value, float)

    @staticmethod
    def from_int(value: int) -> "Immediate":
        return Immediate(str(value), value)

    @staticmethod
    def from_f32(value: float) -> "Immediate":
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        return Immediate(f"0f{bits:08X}", struct.unpack("<f", struct.pack("<I", bits))[0])

    @staticmethod
    def from_f64(value: float) -> "Immediate":
        bits = struct.unpack("<Q", struct.pack("<d", value))[0]
        return Immediate(f"0d{bits:016X}", float(value))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Symbol:
    """A variable, parameter or function name used as an operand (`mov.u64 %rd1, $str`)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class LabelRef:
    """A code label used as an operand (`bra $L__BB0_2`)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Sink:
    """The `_` placeholder: a destination whose value is discarded."""

    def __str__(self) -> str:
        return "_"


@dataclass(frozen=True, slots=True)
class Negated:
    """`!%p`: a predicate operand used negated."""

    register: Register

    def __str__(self) -> str:
        return f"!{self.register.name}"


@dataclass(frozen=True, slots=True)
class PredPair:
    """`%p|%q`: the two destinations of setp/shfl/elect-style instructions."""

    first: "Operand"
    second: "Operand"

    def __str__(self) -> str:
        return f"{self.first}|{self.second}"


@dataclass(frozen=True, slots=True)
class Vector:
    """`{%f1, %f2, _, %f4}`."""

    elements: tuple["Operand", ...]

    def __str__(self) -> str:
        return "{" + ", ".join(str(e) for e in self.elements) + "}"


@dataclass(frozen=True, slots=True)
class Address:
    """`[base+offset]`. base is a Register, a Symbol or None (absolute `[64]`).

    `coordinates` holds the vector of texture/tensor forms: `[tmap, {%r1, %r2}]`.
    `zero_offset_written` records a literal `+0` (`[param0+0]`): same meaning as
    `[param0]`, so not part of equality, but ptxas -G generates different code
    for the two spellings and printing keeps it.
    """

    base: Register | Symbol | None
    offset: int = 0
    coordinates: Vector | None = None
    zero_offset_written: bool = field(default=False, compare=False)

    def __str__(self) -> str:
        if self.base is None:
            inner = str(self.offset)
        elif self.offset or self.zero_offset_written:
            inner = f"{self.base.name}+{self.offset}"
        else:
            inner = self.base.name
        if self.coordinates is not None:
            inner = f"{inner}, {self.coordinates}"
        return f"[{inner}]"


@dataclass(frozen=True, slots=True)
class ParenList:
    """The parenthesised operand lists of `call`: `call (retval0), f, (param0, param1);`."""

    items: tuple["Operand", ...]

    def __str__(self) -> str:
        return "(" + ", ".join(str(e) for e in self.items) + ")"


Operand = Union[Register, SpecialReg, Immediate, Symbol, LabelRef, Sink, Negated, PredPair,
                Vector, Address, ParenList]


# --------------------------------------------------------------------------- instructions


@dataclass(frozen=True, slots=True)
class Guard:
    """`@%p` or `@!%p` in front of an instruction."""

    register: Register
    negated: bool = False

    def __str__(self) -> str:
        return f"@{'!' if self.negated else ''}{self.register.name}"


TYPE_SIZES = {
    "b8": 1, "u8": 1, "s8": 1, "e4m3": 1, "e5m2": 1, "e2m3": 1, "e3m2": 1,
    "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "e4m3x2": 2, "e5m2x2": 2, "ue8m0x2": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8,
    "b128": 16,
}
TYPE_NAMES = frozenset(TYPE_SIZES) | {"pred", "f32x2", "s16x2", "u16x2", "e2m1x2", "s4", "u4",
                                      "b1", "texref", "samplerref", "surfref"}
STATE_SPACES = frozenset({
    "reg", "sreg", "const", "global", "local", "param", "shared", "tex",
    "shared::cta", "shared::cluster", "param::entry", "param::func",
})
ROUNDING_MODES = frozenset({"rn", "rz", "rm", "rp", "rna", "rs", "rni", "rzi", "rmi", "rpi"})
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs",
                         "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"})
MEMORY_ORDERS = frozenset({"weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "sc",
                           "mmio"})
SCOPES = frozenset({"cta", "cluster", "gpu", "sys"})
ATOMIC_OPERATIONS = frozenset({"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch",
                               "cas"})

NO_DESTINATION_OPCODES = frozenset({
    "bra", "brx", "call", "ret", "exit", "trap", "brkpt", "bar", "barrier", "membar", "fence",
    "red", "st", "prefetch", "prefetchu", "nanosleep", "pmevent", "griddepcontrol",
    "setmaxnreg", "cp", "stmatrix", "sust", "sured", "applypriority", "discard", "stackrestore",
    "mbarrier.init", "mbarrier.inval", "mbarrier.expect_tx",
    "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group",
})
READ_MODIFY_WRITE_OPCODES = frozenset({"wgmma.mma_async"})


@dataclass(frozen=True, slots=True)
class Instruction:
    """`[guard] opcode.modifier.modifier operand, operand, ...;`

    `modifiers` keeps every dot suffix in order (`ld.global.nc.v4.f32` ->
    ("global", "nc", "v4", "f32")); the properties below answer the common
    questions about them.
    """

    opcode: str
    modifiers: tuple[str, ...] = ()
    operands: tuple[Operand, ...] = ()
    guard: Guard | None = None
    line: int = field(default=0, compare=False)

    @property
    def full_opcode(self) -> str:
        """`ld.global.f32`."""
        return ".".join((self.opcode,) + self.modifiers)

    def has(self, *modifiers: str) -> bool:
        """True if every one of `modifiers` is among this instruction's modifiers."""
        return all(m in self.modifiers for m in modifiers)

    @property
    def types(self) -> tuple[str, ...]:
        """Type suffixes in order: cvt.rn.f64.s32 -> ("f64", "s32"); ld.v4.f32 -> ("f32",)."""
        return tuple(m for m in self.modifiers if m in TYPE_NAMES)

    @property
    def type(self) -> str | None:
        """The last type suffix (the operation type for most opcodes), or None."""
        for m in reversed(self.modifiers):
            if m in TYPE_NAMES:
                return m
        return None

    @property
    def state_space(self) -> str | None:
        """global/shared/shared::cta/local/const/param/... or None (generic addressing)."""
        for m in self.modifiers:
            if m in STATE_SPACES:
                return m
        return None

    @property
    def rounding(self) -> str | None:
        for m in self.modifiers:
            if m in ROUNDING_MODES:
                return m
        return None

    @property
    def comparison(self) -> str | None:
        """setp/set/slct comparison operator (eq, lt, geu, ...)."""
        for m in self.modifiers:
            if m in COMPARISONS:
                return m
        return None

    @property
    def vector_width(self) -> int:
        """2/4/8 for .v2/.v4/.v8 forms, else 1."""
        for m in self.modifiers:
            if len(m) == 2 and m[0] == "v" and m[1] in "248":
                return int(m[1])
        return 1

    @property
    def memory_order(self) -> str | None:
        for m in self.modifiers:
            if m in MEMORY_ORDERS:
                return m
        return None

    @property
    def scope(self) -> str | None:
        for m in self.modifiers:
            if m in SCOPES:
                return m
        return None

    @property
    def atomic_operation(self) -> str | None:
        """The operation of atom/red (add, cas, exch, ...)."""
        if self.opcode not in ("atom", "red"):
            return None
        for m in self.modifiers:
            if m in ATOMIC_OPERATIONS:
                return m
        return None

    def _has_destination(self) -> bool:
        if self.opcode in ("bar", "barrier") and "red" in self.modifiers and self.operands:
            return True  # bar.red.popc.u32 %r, 0, %p; writes its reduction result
        if not self.operands or self.opcode in NO_DESTINATION_OPCODES:
            return False
        if self.modifiers and f"{self.opcode}.{self.modifiers[0]}" in NO_DESTINATION_OPCODES:
            return False
        return not isinstance(self.operands[0], Address)

    def defs(self) -> tuple[Register, ...]:
        """Registers this instruction writes (see the module docstring for the rule)."""
        if not self._has_destination():
            return ()
        return tuple(_registers_in(self.operands[0], destination=True))

    def uses(self) -> tuple[Register, ...]:
        """Registers this instruction reads, guard included, in operand order."""
        out: list[Register] = []
        if self.guard is not None:
            out.append(self.guard.register)
        operands = self.operands
        if self._has_destination():
            dest = operands[0]
            rmw = self.opcode in READ_MODIFY_WRITE_OPCODES or (
                self.modifiers and f"{self.opcode}.{self.modifiers[0]}" in READ_MODIFY_WRITE_OPCODES)
            if rmw:
                out.extend(_registers_in(dest, destination=True))
            operands = operands[1:]
        for op in operands:
            out.extend(_registers_in(op, destination=False))
        return tuple(out)

    def __str__(self) -> str:
        """One instruction without indentation: `@%p1 bra.uni \t$L__BB0_2;` (operands
        format themselves; the printer lays instructions out in functions)."""
        head = self.opcode if not self.modifiers else self.opcode + "." + ".".join(self.modifiers)
        if self.guard is not None:
            head = f"{self.guard} {head}"
        if not self.operands:
            return head + ";"
        return f"{head} \t{', '.join(map(str, self.operands))};"


def _registers_in(op: Operand, destination: bool) -> Iterator[Register]:
    if isinstance(op, Register):
        yield op
    elif isinstance(op, Address):
        if isinstance(op.base, Register):
            yield op.base
        if op.coordinates is not None:
            yield from _registers_in(op.coordinates, False)
    elif isinstance(op, Vector):
        for e in op.elements:
            yield from _registers_in(e, destination)
    elif isinstance(op, PredPair):
        yield from _registers_in(op.first, destination)
        yield from _registers_in(op.second, destination)
    elif isinstance(op, Negated):
        yield op.register
    elif isinstance(op, ParenList):
        for e in op.items:
            yield from _registers_in(e, destination)


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True, slots=True)
class Param:
    """A kernel/function parameter, or a call prototype's (name `_`).

    `.param .align 8 .b8 p[24]` -> Param("p", "b8", align=8, array_dims=(24,));
    `.param .u64 .ptr .global .align 4 p` -> Param("p", "u64", ptr=True,
    ptr_space="global", ptr_align=4). `space` is "param" or "reg" (.func only).
    """

    name: str
    type: str
    space: str = "param"
    align: int | None = None
    vector: int | None = None
    array_dims: tuple[int | None, ...] = ()
    ptr: bool = False
    ptr_space: str | None = None
    ptr_align: int | None = None


@dataclass(frozen=True, slots=True)
class RegDecl:
    """`.reg .b32 %r<12>;` is RegDecl("b32", "%r", 12); `.reg .pred p;` has count None."""

    type: str
    name: str
    count: int | None = None
    vector: int | None = None
    align: int | None = None

    def declares(self, name: str) -> bool:
        if self.count is None:
            return name == self.name
        prefix = self.name
        if not name.startswith(prefix):
            return False
        digits = name[len(prefix):]
        return digits.isdigit() and (digits == "0" or digits[0] != "0") and int(digits) < self.count

    def names(self) -> list[str]:
        if self.count is None:
            return [self.name]
        return [f"{self.name}{i}" for i in range(self.count)]


@dataclass(frozen=True, slots=True)
class SymbolAddress:
    """An address in an initializer: `sym`, `sym+8`, `generic(sym)`, `generic(sym)+4`."""

    name: str
    offset: int = 0
    generic: bool = False


@dataclass(frozen=True, slots=True)
class InitList:
    """`{a, b, c}` (nested for multi-dimensional arrays)."""

    items: tuple["Initializer", ...]


Initializer = Union[Immediate, SymbolAddress, InitList]


@dataclass(frozen=True, slots=True)
class VarDecl:
    """A variable in a state space, at module scope or inside a block.

    `.extern .shared .align 16 .b8 smem[];` ->
    VarDecl("shared", "b8", "smem", linkage=("extern",), align=16, array_dims=(None,)).
    """

    space: str
    type: str
    name: str
    linkage: tuple[str, ...] = ()
    align: int | None = None
    vector: int | None = None
    array_dims: tuple[int | None, ...] = ()
    init: Initializer | None = None
    attributes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Label:
    name: str


@dataclass(frozen=True, slots=True)
class Pragma:
    """`.pragma "nounroll";` -> Pragma("nounroll") (text between the quotes, verbatim)."""

    text: str


@dataclass(frozen=True, slots=True)
class Loc:
    """`.loc 1 7 5` plus anything after the column, as token texts
    (`, function_name $L__info_string0, inlined_at 1 20 3`)."""

    file: int
    line: int
    column: int
    extra: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FileDirective:
    """`.file 1 "/path/x.cu"` plus optional `, timestamp, size` as token texts."""

    index: int
    path: str
    extra: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BranchTargets:
    """`name: .branchtargets L1, L2;` (jump table for brx.idx)."""

    name: str
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallTargets:
    """`name: .calltargets f1, f2;`."""

    name: str
    functions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallPrototype:
    """`name: .callprototype (.param .b32 _) _ (.param .b64 _);`.

    return_params is None when there is no return list (`.callprototype _ (...)`).
    """

    name: str
    return_params: tuple[Param, ...] | None
    params: tuple[Param, ...]
    noreturn: bool = False


@dataclass(frozen=True, slots=True)
class SectionData:
    """A data line of a debug section: `.b32 439`, `.b64 $L__func_begin0`, `.b8 135,64`."""

    type: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Section:
    """`.section .debug_info { ... }`: entries are SectionData and Label."""

    name: str
    entries: tuple[SectionData | Label, ...]


@dataclass(frozen=True, slots=True)
class FunctionDirective:
    """Directives between a function's signature and its body:
    `.maxntid 256, 1, 1` -> FunctionDirective("maxntid", (256, 1, 1));
    `.noreturn` -> ("noreturn", ()); `.pragma "nounroll"` -> ("pragma", ('"nounroll"',))."""

    name: str
    args: tuple[int | str, ...] = ()


Statement = Union["Block", RegDecl, VarDecl, Label, Instruction, Pragma, Loc, BranchTargets,
                  CallTargets, CallPrototype]


# --------------------------------------------------------------------------- containers


@dataclass
class Block:
    """A `{ }` scope: a function body or a nested block (inline asm, call sequences)."""

    statements: list[Statement] = field(default_factory=list)

    def clone(self) -> "Block":
        return Block([s.clone() if isinstance(s, Block) else s for s in self.statements])

    def instructions(self) -> Iterator[Instruction]:
        """Every instruction in this block and nested blocks, in order."""
        for _block, _index, ins in iter_instructions(self):
            yield ins


@dataclass
class Function:
    """A `.entry` kernel (kind "entry") or a `.func` (kind "func").

    `body` is None for declarations without a body (`.extern .func vprintf(...);`).
    """

    name: str
    kind: str
    linkage: tuple[str, ...] = ()
    params: list[Param] = field(default_factory=list)
    return_params: list[Param] | None = None
    directives: list[FunctionDirective] = field(default_factory=list)
    body: Block | None = None

    @property
    def is_entry(self) -> bool:
        return self.kind == "entry"

    def clone(self) -> "Function":
        return Function(self.name, self.kind, self.linkage, list(self.params),
                        None if self.return_params is None else list(self.return_params),
                        list(self.directives), None if self.body is None else self.body.clone())

    def directive(self, name: str) -> FunctionDirective | None:
        for d in self.directives:
            if d.name == name:
                return d
        return None

    @property
    def has_body(self) -> bool:
        """A definition, not a declaration (without parsing a body not parsed yet)."""
        return self.body is not None


class LazyFunction(Function):
    """A function whose body is parsed at its first use (parse_module's lazy_bodies,
    for modules of many megabytes where a job runs a few kernels). Reading `body`
    parses it (a PtxParseError then, not at parse_module); assigning it replaces it."""

    def __init__(self, *args, parse_body: Callable[[], Block], source: str, span: tuple[int, int], **kwargs):
        self._body: Block | None = None
        self._parse_body: Callable[[], Block] | None = parse_body
        self._source, self._span = source, span
        super().__init__(*args, **kwargs)     # its `self.body = None` leaves the body pending

    @property
    def body_text(self) -> str | None:
        """The body's source, `{` to `}`, while it is unparsed."""
        return None if self._parse_body is None else self._source[self._span[0]:self._span[1]]

    @property
    def body(self) -> Block | None:
        if self._parse_body is not None:
            parse, self._parse_body = self._parse_body, None
            try:
                self._body = parse()
            except BaseException:
                self._parse_body = parse          # the next use reports the same error
                raise
        return self._body

    @body.setter
    def body(self, value: Block | None) -> None:
        if value is None and self._parse_body is not None:
            return                                # the dataclass __init__'s default
        self._body, self._parse_body = value, None

    @property
    def is_parsed(self) -> bool:
        return self._parse_body is None

    @property
    def has_body(self) -> bool:
        return self._parse_body is not None or self._body is not None


ModuleItem = Union[Function, VarDecl, FileDirective, Section, Pragma]


@dataclass
class Module:
    """A PTX module: header directives and items in source order."""

    version: str
    targets: tuple[str, ...]
    address_size: int | None = None
    items: list[ModuleItem] = field(default_factory=list)

    def clone(self) -> "Module":
        return Module(self.version, self.targets, self.address_size,
                      [i.clone() if isinstance(i, Function) else i for i in self.items])

    def functions(self) -> list[Function]:
        return [i for i in self.items if isinstance(i, Function)]

    def entries(self) -> list[Function]:
        """The kernels defined here (`.entry` with a body), in source order."""
        return [i for i in self.items
                if isinstance(i, Function) and i.kind == "entry" and i.has_body]

    def function(self, name: str) -> Function:
        for i in self.items:
            if isinstance(i, Function) and i.name == name and i.has_body:
                return i
        for i in self.items:
            if isinstance(i, Function) and i.name == name:
                return i
        raise KeyError(f"no function or kernel named {name!r} in this module")

    def globals(self) -> list[VarDecl]:
        return [i for i in self.items if isinstance(i, VarDecl)]


# --------------------------------------------------------------------------- traversal


def iter_statements(block: Block) -> Iterator[tuple[Block, int, Statement]]:
    """(parent block, index in parent, statement) for every statement, depth first, nested
    blocks yielded before their contents. Collect before mutating; then mutate from the
    highest index down so earlier indices stay valid."""
    for i, s in enumerate(block.statements):
        yield block, i, s
        if isinstance(s, Block):
            yield from iter_statements(s)


def iter_instructions(block: Block) -> Iterator[tuple[Block, int, Instruction]]:
    """(parent block, index in parent, instruction) for every instruction, in program order."""
    for i, s in enumerate(block.statements):
        if isinstance(s, Instruction):
            yield block, i, s
        elif isinstance(s, Block):
            yield from iter_instructions(s)


def map_operands(ins: Instruction, fn) -> Instruction:
    """A copy of `ins` with every operand (recursively: vector elements, address bases,
    pair halves, call lists) replaced by fn(operand); fn returns its argument to keep it."""
    new_ops = tuple(_map_operand(op, fn) for op in ins.operands)
    guard = ins.guard
    if guard is not None:
        reg = fn(guard.register)
        if reg is not guard.register:
            guard = Guard(reg, guard.negated)
    if new_ops == ins.operands and guard is ins.guard:
        return ins
    return replace(ins, operands=new_ops, guard=guard)


def _map_operand(op: Operand, fn) -> Operand:
    if isinstance(op, Address):
        base = fn(op.base) if op.base is not None else None
        coords = _map_operand(op.coordinates, fn) if op.coordinates is not None else None
        op = Address(base, op.offset, coords, op.zero_offset_written)
    elif isinstance(op, Vector):
        op = Vector(tuple(_map_operand(e, fn) for e in op.elements))
    elif isinstance(op, PredPair):
        op = PredPair(_map_operand(op.first, fn), _map_operand(op.second, fn))
    elif isinstance(op, Negated):
        op = Negated(fn(op.register))
    elif isinstance(op, ParenList):
        op = ParenList(tuple(_map_operand(e, fn) for e in op.items))
    return fn(op)


# --------------------------------------------------------------------------- fresh names


class NameAllocator:
    """Fresh register and label names for one function that collide with nothing in it
    (declared registers, ranges, labels, parameters) or in its module (globals, functions).

    `new_register("u32")` also declares the register in the function body, after the
    declarations it starts with.
    """

    def __init__(self, function: Function, module: Module | None = None, prefix: str = "tally"):
        if function.body is None:
            raise ValueError(f"function {function.name!r} has no body to allocate names in")
        self.function = function
        self.prefix = prefix
        self._taken: set[str] = {p.name for p in function.params}
        self._taken.update(p.name for p in function.return_params or ())
        self._ranges: list[RegDecl] = []
        if module is not None:
            for item in module.items:
                if isinstance(item, (Function, VarDecl)):
                    self._taken.add(item.name)
        for _block, _i, s in iter_statements(function.body):
            if isinstance(s, RegDecl):
                if s.count is None:
                    self._taken.add(s.name)
                else:
                    self._ranges.append(s)
            elif isinstance(s, (Label, VarDecl, BranchTargets, CallTargets, CallPrototype)):
                self._taken.add(s.name)
        self._counter = itertools.count()

    def is_taken(self, name: str) -> bool:
        return name in self._taken or any(r.declares(name) for r in self._ranges)

    def _fresh(self, stem: str) -> str:
        while True:
            name = f"{stem}{next(self._counter)}"
            if not self.is_taken(name):
                self._taken.add(name)
                return name

    def new_label(self, hint: str = "L") -> str:
        return self._fresh(f"$__{self.prefix}_{_sanitize(hint)}_")

    def new_register(self, type: str, hint: str = "r") -> Register:
        name = self._fresh(f"%{self.prefix}_{_sanitize(hint)}_")
        body = self.function.body.statements
        at = 0
        while at < len(body) and isinstance(body[at], (RegDecl, VarDecl)):
            at += 1
        body.insert(at, RegDecl(type, name))
        return Register(name)


def _sanitize(hint: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", hint) or "x"


# --------------------------------------------------------------------------- builders


def reg(name: str) -> Register:
    return Register(name)


def imm(value: int | float, type: str | None = None) -> Immediate:
    """An immediate: ints print in decimal; floats need type "f32" or "f64"."""
    if isinstance(value, float) or type in ("f32", "f64"):
        if type == "f64":
            return Immediate.from_f64(float(value))
        if type == "f32":
            return Immediate.from_f32(float(value))
        raise ValueError("float immediates need type='f32' or type='f64' to choose the bit pattern")
    return Immediate.from_int(int(value))


def sym(name: str) -> Symbol:
    return Symbol(name)


def label_ref(name: str) -> LabelRef:
    return LabelRef(name)


def addr(base: Register | Symbol | str | None, offset: int = 0) -> Address:
    """`addr("%rd1", 16)` -> [%rd1+16]; a str starting with % is a register, else a symbol."""
    if isinstance(base, str):
        base = Register(base) if base.startswith("%") else Symbol(base)
    return Address(base, offset)


def special(name: str, component: str | None = None) -> SpecialReg:
    """`special("%ctaid", "x")`; the leading % is optional."""
    return SpecialReg(name if name.startswith("%") else "%" + name, component)


def vector(*elements: Operand) -> Vector:
    return Vector(tuple(elements))


def instr(opcode: str, *operands: Operand, guard: Register | Guard | None = None,
          negated: bool = False) -> Instruction:
    """`instr("add.s32", reg("%r1"), reg("%r2"), imm(4))`; the dotted opcode is split into
    opcode and modifiers. `guard=reg("%p1")` (with negated=True for `@!%p1`)."""
    head, *mods = opcode.split(".")
    if not head or any(not m for m in mods):
        raise ValueError(f"bad opcode {opcode!r}: expected name.mod.mod")
    for op in operands:
        if not isinstance(op, (Register, SpecialReg, Immediate, Symbol, LabelRef, Sink,
                               Negated, PredPair, Vector, Address, ParenList)):
            raise TypeError(f"operand {op!r} of {opcode} is not an IR operand; use reg()/imm()/...")
    if isinstance(guard, Register):
        guard = Guard(guard, negated)
    return Instruction(head, tuple(mods), tuple(operands), guard)


# Every instruction name of the PTX ISA 9.0 (the part before the first dot). The parser
# rejects others, so a typo or garbage never reaches a pass as an "instruction".
KNOWN_OPCODES = frozenset("""
abs activemask add addc alloca and applypriority atom bar barrier bfe bfi bfind bmsk bra brev
brkpt brx call clusterlaunchcontrol clz cnot copysign cos cp createpolicy cvt cvta discard div
dp2a dp4a elect ex2 exit fence fma fns getctarank griddepcontrol isspacep istypep ld ldmatrix
ldu lg2 lop3 mad mad24 madc mapa match max mbarrier membar min mma mov movmatrix mul mul24
multimem nanosleep neg not or pmevent popc prefetch prefetchu prmt rcp red redux rem ret rsqrt
sad selp set setmaxnreg setp shf shfl shl shr sin slct sqrt st stackrestore stacksave stmatrix
sub subc suld suq sured sust szext tanh tcgen05 tensormap testp tex tld4 trap txq vabsdiff
vabsdiff2 vabsdiff4 vadd vadd2 vadd4 vavrg2 vavrg4 vmad vmax vmax2 vmax4 vmin vmin2 vmin4 vote
vset vset2 vset4 vshl vshr vsub vsub2 vsub4 wgmma wmma xor
""".split())
