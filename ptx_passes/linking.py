"""Link several PTX modules into one, as the driver's JIT linker (cuLink*) does for
PTX inputs: numba's kernels and their helper PTX, `-rdc=true` programs whose
translation units call each other's device functions.

The result is one PTX module that any loader takes as it is (the emulator, the
real driver's JIT, ptxas). Symbols follow PTX's linking directives:

* `.visible` definitions are global and strong: one per name across the inputs,
  a second one is an error ("multiple definition").
* `.weak` (and `.common` variables) are global and weak: the first one wins
  unless a strong definition exists; the others are dropped.
* `.extern` declarations (and bodiless `.visible`/`.weak` function prototypes)
  are references: each must resolve to a global definition in some input, or
  name one of PTX's system calls (vprintf, malloc, free, __assertfail), which
  the device provides, or the driver's cudaGraphSetConditional. An unresolved
  reference is an error naming the symbol and the input that uses it.
* Symbols without a linking directive are local to their input. When two inputs
  use the same local name (or a local name equals a global one), the later
  input's symbol is renamed, so nothing is captured by accident.
* `.extern .shared` arrays (dynamic shared memory) are never resolved: one
  declaration per name is kept, with the largest alignment asked for.
* A declaration whose prototype differs from its definition (a return value one
  side has and the other lacks, parameters of other sizes: numba declares C-ABI
  void functions as returning a .b64) links, as nvJitLink links it: calls made
  through that declaration go to an adapter with the declared prototype that
  calls the definition, passing each parameter's bytes (zeros where the
  definition's is longer) and returning the definition's result bytes (zeros
  where it has fewer). The info log names each such function.
* Inputs marked `library` (members of a static library) are linked only when
  they define a symbol that the inputs linked so far reference, as a static
  linker takes archive members.

PTX wants a symbol declared before it is used, so the inputs are concatenated in
order, and where an input uses a global symbol defined by a later input, the
first use gets a bodiless prototype (functions) or the definition itself moves
up (variables). The header is the newest `.version` and the highest `.target`
of the inputs; `.file` indices are renumbered per input. Debug sections
(`.section .debug_*`, from `-G`) cannot be merged and are dropped with a line
in the log; `.loc` lines keep file, line and column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Sequence

from . import ir
from .errors import PtxParseError
from .parser import parse_module
from .printer import print_module
from .reachability import reachable_items

# Functions the device itself provides (PTX ISA, "System calls"), and the driver's
# cudaGraphSetConditional (which tally's server defines: passes/graph_conditions.py);
# they stay external.
SYSTEM_CALLS = frozenset({"vprintf", "malloc", "free", "__assertfail", "cudaGraphSetConditional"})
# ptxas treats every function named with this prefix as a system call of the driver
# (libcudadevrt's cooperative-groups functions call __cuda_syscall_CGS_*).
SYSTEM_CALL_PREFIX = "__cuda_syscall"


def is_system_call(name: str) -> bool:
    return name in SYSTEM_CALLS or name.startswith(SYSTEM_CALL_PREFIX)

_STRONG, _WEAK, _LOCAL, _REFERENCE, _SHARED_EXTERN = "strong", "weak", "local", "reference", "shared-extern"


class LinkError(ValueError):
    """The inputs do not link; `problems` has one line per problem (what the error log shows)."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class LinkedModule:
    text: str                 # the linked PTX
    log: tuple[str, ...]      # what the linker did, one line each (the info log)


@dataclass
class _Symbol:
    name: str
    role: str                 # _STRONG, _WEAK, _LOCAL, _REFERENCE or _SHARED_EXTERN
    item: ir.Function | ir.VarDecl
    input: int                # index of the input that holds it

    @property
    def is_function(self) -> bool:
        return isinstance(self.item, ir.Function)


@dataclass(frozen=True)
class LinkInput:
    """One PTX input, parsed (the linker's callers parse each input as it is added).
    `library`: a static library's member, linked only if something needs it."""

    name: str
    text: str
    module: ir.Module
    library: bool = False


def read_link_input(name: str, text: str) -> LinkInput:
    """Parses one input; PtxParseError (with the input's name and position) if it is not PTX."""
    return LinkInput(name, text, parse_module(text, name))


def link_ptx(inputs: Sequence[tuple[str, str]], verbose: bool = False) -> LinkedModule:
    """Links PTX texts given as (name, text). Raises LinkError."""
    parsed = []
    for name, text in inputs:
        try:
            parsed.append(read_link_input(name, text))
        except PtxParseError as e:
            raise LinkError([f"{name}: not valid PTX: {e.one_line()}"]) from None
    return link_inputs(parsed, verbose)


def link_inputs(inputs: Sequence[LinkInput], verbose: bool = False) -> LinkedModule:
    """Links parsed inputs, in order. Raises LinkError. With `verbose` the log also says
    where each cross-input reference resolved."""
    if not inputs:
        raise LinkError(["nothing to link: no input was added"])
    inputs, log = _needed_members(inputs)
    if not inputs:
        raise LinkError(["nothing to link: only static libraries were added, and nothing needs their members"])
    linked = _Linker([i.name for i in inputs], [i.module for i in inputs], verbose).link([i.text for i in inputs])
    return LinkedModule(linked.text, (*log, *linked.log))


def _needed_members(inputs: Sequence[LinkInput]) -> tuple[list[LinkInput], list[str]]:
    """The inputs without the library members nothing needs: a member is taken when it
    defines a global symbol that the inputs taken so far reference and none defines,
    until no more is needed."""
    def defines(i: LinkInput) -> set[str]:
        return {item.name for item in i.module.items if isinstance(item, (ir.Function, ir.VarDecl))
                and _role(item) in (_STRONG, _WEAK)}

    def references(i: LinkInput) -> set[str]:
        return {item.name for item in i.module.items if isinstance(item, (ir.Function, ir.VarDecl))
                and _role(item) == _REFERENCE and not is_system_call(item.name)}

    taken = [i for i in inputs if not i.library]
    waiting = [i for i in inputs if i.library]
    log: list[str] = []
    defined = set().union(*(defines(i) for i in taken)) if taken else set()
    wanted = set().union(*(references(i) for i in taken)) if taken else set()
    changed = True
    while changed and waiting:
        changed = False
        for member in list(waiting):
            provides = defines(member) & (wanted - defined)
            if provides:
                waiting.remove(member)
                taken.append(member)
                defined |= defines(member)
                wanted |= references(member)
                shown = ", ".join(sorted(provides)[:4]) + (", ..." if len(provides) > 4 else "")
                log.append(f"{member.name}: linked for {shown}")
                changed = True
    for member in waiting:
        log.append(f"{member.name}: not linked (nothing refers to what it defines)")
    order = {id(i): k for k, i in enumerate(inputs)}
    return sorted(taken, key=lambda i: order[id(i)]), log


def _role(item: ir.Function | ir.VarDecl) -> str:
    linkage = set(item.linkage)
    if isinstance(item, ir.VarDecl):
        if "extern" in linkage:
            return _SHARED_EXTERN if item.space.startswith("shared") else _REFERENCE
        if "visible" in linkage:
            return _STRONG
        return _WEAK if linkage & {"weak", "common"} else _LOCAL
    if item.body is None:
        # A bodiless function names a definition: a global one unless it has no linkage
        # (nvcc's forward declaration of a function local to the input).
        return _REFERENCE if linkage & {"extern", "visible", "weak"} else _LOCAL
    if "visible" in linkage:
        return _STRONG
    return _WEAK if "weak" in linkage else _LOCAL


def _signature(fn: ir.Function) -> tuple:
    def shape(params):
        return None if params is None else tuple((p.type, p.vector, p.array_dims) for p in params)
    return shape(fn.return_params), shape(fn.params)


class _Linker:
    def __init__(self, names: list[str], modules: list[ir.Module], verbose: bool):
        self.names = names
        self.modules = modules
        self.verbose = verbose
        self.problems: list[str] = []
        self.log: list[str] = []
        # (input, name) -> the definition a differently declared reference calls (an adapter)
        self.adapters: dict[tuple[int, str], _Symbol] = {}
        self.symbols: list[list[_Symbol]] = [
            [_Symbol(item.name, _role(item), item, i) for item in m.items if isinstance(item, (ir.Function, ir.VarDecl))]
            for i, m in enumerate(modules)]

    # ---- resolution -------------------------------------------------------------

    def link(self, texts: Sequence[str]) -> LinkedModule:
        header = self._header()
        chosen = self._choose_definitions()
        unresolved = self._check_references(chosen)
        renames = self._local_renames()
        if self.problems:
            raise LinkError(self.problems)
        if len(self.modules) == 1 and not renames[0] and not unresolved:
            # One input that needs nothing: handed on exactly as written.
            self.log.append(f"{self.names[0]}: one PTX input, nothing to resolve")
            return LinkedModule(texts[0], tuple(self.log))
        items = reachable_items(self._emit(chosen, renames), self.log)
        # Only references that code a kernel can run still makes must resolve: nvcc's
        # device runtime (linked into every -rdc program) calls the driver's own
        # functions from code that the program's kernels never reach.
        declared = {i.name for i in items if isinstance(i, (ir.Function, ir.VarDecl))}
        for name, (where, what) in unresolved.items():
            if name in declared:
                self.problems.append(f"undefined reference to '{name}' in {where}: no input defines this {what} "
                                     "(add the PTX that defines it with cuLinkAddData)")
        if self.problems:
            raise LinkError(self.problems)
        module = ir.Module(*header, items=items)
        self.log.insert(0, f"linked {len(self.modules)} PTX input(s) ({', '.join(self.names)}): "
                           f".version {module.version}, .target {', '.join(module.targets)}")
        return LinkedModule(print_module(module), tuple(self.log))

    def _header(self) -> tuple[str, tuple[str, ...], int | None]:
        def version_key(v: str) -> tuple[int, ...]:
            return tuple(int(x) for x in re.findall(r"\d+", v))

        version = max((m.version for m in self.modules), key=version_key)
        sizes = {m.address_size or 64 for m in self.modules}
        if len(sizes) > 1:
            self.problems.append("inputs disagree on .address_size ("
                                 + ", ".join(f"{n}: {m.address_size or 64}" for n, m in zip(self.names, self.modules))
                                 + "): link only 64-bit PTX")
        arch, options = None, []
        for m in self.modules:
            for t in m.targets:
                number = re.match(r"(?:sm|compute)_(\d+)", t)
                if number is None:
                    if t not in options:
                        options.append(t)
                elif arch is None or int(number.group(1)) > int(re.match(r"\D+_(\d+)", arch).group(1)):
                    arch = t
        targets = tuple(([arch] if arch else []) + options)
        return version, targets, self.modules[0].address_size

    def _choose_definitions(self) -> dict[str, _Symbol]:
        chosen: dict[str, _Symbol] = {}
        for table in self.symbols:
            for s in table:
                if s.role not in (_STRONG, _WEAK):
                    continue
                first = chosen.get(s.name)
                if first is None:
                    chosen[s.name] = s
                elif first.is_function != s.is_function:
                    self.problems.append(f"'{s.name}' is a {self._what(first)} in {self.names[first.input]} and a "
                                         f"{self._what(s)} in {self.names[s.input]}")
                elif first.role == _STRONG and s.role == _STRONG:
                    self.problems.append(f"multiple definition of '{s.name}' in {self.names[s.input]} "
                                         f"(first defined in {self.names[first.input]})")
                elif first.role == _WEAK and s.role == _STRONG:
                    chosen[s.name] = s
        for name, s in chosen.items():
            dropped = [x for t in self.symbols for x in t if x.name == name and x.role in (_STRONG, _WEAK) and x is not s]
            for x in dropped:
                self.log.append(f"'{name}': kept the {s.role} definition from {self.names[s.input]}, "
                                f"dropped the weak one in {self.names[x.input]}")
        return chosen

    def _check_references(self, chosen: dict[str, _Symbol]) -> dict[str, tuple[str, str]]:
        """Checks that references match their definitions; returns the unresolved ones
        (name -> (first input using it, what it is)), system calls left out."""
        unresolved: dict[str, tuple[str, str]] = {}
        for table in self.symbols:
            for s in table:
                if s.role != _REFERENCE:
                    continue
                target = chosen.get(s.name)
                where = self.names[s.input]
                if target is None:
                    if not (s.is_function and is_system_call(s.name)):
                        unresolved.setdefault(s.name, (where, self._what(s)))
                elif target.is_function != s.is_function:
                    self.problems.append(f"{where} uses '{s.name}' as a {self._what(s)}, but "
                                         f"{self.names[target.input]} defines a {self._what(target)}")
                elif s.is_function and _signature(s.item) != _signature(target.item):
                    if _sizes(s.item) == _sizes(target.item):
                        continue      # same bytes, other type names (.b32 / .s32): calls match as they are
                    self.adapters[(s.input, s.name)] = target
                    self.log.append(f"the declaration of '{s.name}' in {where} differs from its definition in "
                                    f"{self.names[target.input]} (parameters or return value): its calls go "
                                    "through an adapter, as nvJitLink links them")
                elif self.verbose and s.input != target.input:
                    self.log.append(f"'{s.name}' used in {where} resolved to {self.names[target.input]}")
        return unresolved

    @staticmethod
    def _what(s: _Symbol) -> str:
        if isinstance(s.item, ir.VarDecl):
            return "variable"
        return "kernel" if s.item.is_entry else "function"

    def _local_renames(self) -> list[dict[str, str]]:
        taken = {s.name for t in self.symbols for s in t if s.role != _LOCAL}
        renames: list[dict[str, str]] = []
        for i, table in enumerate(self.symbols):
            mine: dict[str, str] = {}
            for s in table:
                if s.role != _LOCAL or s.name in mine:
                    continue
                if s.name in taken:
                    new, n = f"{s.name}__tally_in{i}", 0
                    while new in taken:
                        n += 1
                        new = f"{s.name}__tally_in{i}_{n}"
                    mine[s.name] = new
                    self.log.append(f"{self.names[i]}: local symbol '{s.name}' renamed '{new}' "
                                    "(another input uses the name)")
                    taken.add(new)
                else:
                    mine[s.name] = s.name
                    taken.add(s.name)
            renames.append({old: new for old, new in mine.items() if old != new})
        for (i, name) in self.adapters:
            new, n = f"{name}__tally_as_declared_in{i}", 0
            while new in taken:
                n += 1
                new = f"{name}__tally_as_declared_in{i}_{n}"
            taken.add(new)
            renames[i][name] = new
        return renames

    # ---- output -----------------------------------------------------------------

    def _emit(self, chosen: dict[str, _Symbol], renames: list[dict[str, str]]) -> list:
        out: list = []
        placed = _Placed()
        pragmas: set[str] = set()
        next_file = 1
        dropped_sections = 0
        for i, module in enumerate(self.modules):
            placed.input = i
            files: dict[int, int] = {}
            for item in module.items:
                if isinstance(item, ir.FileDirective):
                    files[item.index] = next_file
                    out.append(replace(item, index=next_file))
                    next_file += 1
                elif isinstance(item, ir.Section):
                    dropped_sections += 1
                elif isinstance(item, ir.Pragma):
                    if item.text not in pragmas:
                        pragmas.add(item.text)
                        out.append(item)
                elif (i, item.name) in self.adapters and isinstance(item, ir.Function) and item.body is None:
                    target = self.adapters[(i, item.name)]
                    if item.name not in placed.defined and item.name not in placed.declared:
                        placed.declared.add(item.name)
                        out.append(_prototype(target.item))
                    out.append(_adapter(item, renames[i][item.name], target.item))
                else:
                    self._emit_symbol(item, chosen, renames, files, placed, out)
        if dropped_sections:
            self.log.append(f"dropped {dropped_sections} debug section(s): debug information is not linked")
        return out

    @staticmethod
    def _emit_symbol(item, chosen: dict[str, _Symbol], renames: list[dict[str, str]], files: dict[int, int],
                     placed: "_Placed", out: list) -> None:
        """Appends what `item` (of the input being emitted, whose files are `files`) becomes."""
        role, name = _role(item), item.name
        if role == _LOCAL:
            out.append(_rewrite(item, renames[placed.input], files))
            return
        if role == _SHARED_EXTERN:
            at = placed.shared.get(name)
            if at is None:
                placed.shared[name] = len(out)
                out.append(item)
            elif (item.align or 0) > (out[at].align or 0):
                out[at] = replace(out[at], align=item.align)
            return
        target = chosen.get(name)
        if target is None:                 # a system call: one declaration
            if name not in placed.declared:
                placed.declared.add(name)
                out.append(item)
            return
        if isinstance(target.item, ir.VarDecl):
            # A variable is defined where it is first named, so every later use follows it.
            if name not in placed.defined:
                placed.defined.add(name)
                out.append(_rewrite_var(target.item, renames[target.input]))
            return
        if target.item is item:
            placed.defined.add(name)
            out.append(_rewrite(item, renames[target.input], files))
        elif name not in placed.defined and name not in placed.declared:
            # Used before its definition (a later input's): a prototype goes first.
            placed.declared.add(name)
            out.append(_prototype(target.item))


def _prototype(fn: ir.Function) -> ir.Function:
    return ir.Function(fn.name, fn.kind, fn.linkage, list(fn.params),
                       None if fn.return_params is None else list(fn.return_params))


def _sizes(fn: ir.Function) -> tuple:
    def size(params):
        return None if params is None else tuple(_param_bytes(p) for p in params)
    return size(fn.return_params), size(fn.params)


def _param_bytes(p: ir.Param) -> int:
    count = 1
    for d in p.array_dims:
        count *= d or 0
    return ir.TYPE_SIZES.get(p.type, 1) * (p.vector or 1) * count


def _adapter(declared: ir.Function, name: str, target: ir.Function) -> ir.Function:
    """A function with the declared prototype, named `name`, that calls `target` with
    the declared parameters' bytes (zeros past them) and returns the bytes of the
    target's result (zeros past them)."""
    declared_rets, target_rets = list(declared.return_params or ()), list(target.return_params or ())
    own = ir.Function(name, "func", (), [replace(p, name=f"p{k}") for k, p in enumerate(declared.params)],
                      [replace(p, name=f"r{k}") for k, p in enumerate(declared_rets)] if declared_rets else None)
    lines = [_without_header(print_module(ir.Module("8.0", ("sm_50",), 64, [own]))).rstrip().rstrip(";"),
             "{", ".reg .b16 %b;", "{"]

    def copy(src: str, have: int, dst: str, size: int) -> None:
        for b in range(size):
            lines.append(f"ld.param.b8 %b, [{src}+{b}];" if b < have else "mov.b16 %b, 0;")
            lines.append(f"st.param.b8 [{dst}+{b}], %b;")

    for k, p in enumerate(target.params):
        lines.append(_param_declaration(p, f"a{k}"))
        copy(f"p{k}", _param_bytes(declared.params[k]) if k < len(declared.params) else 0, f"a{k}",
             _param_bytes(p))
    for k, p in enumerate(target_rets):
        lines.append(_param_declaration(p, f"t{k}"))
    results = f"({', '.join(f't{k}' for k in range(len(target_rets)))}), " if target_rets else ""
    lines.append(f"call.uni {results}{target.name}, ({', '.join(f'a{k}' for k in range(len(target.params)))});")
    for k, p in enumerate(declared_rets):
        copy(f"t{k}", _param_bytes(target_rets[k]) if k < len(target_rets) else 0, f"r{k}", _param_bytes(p))
    lines += ["}", "ret;", "}"]
    # the target's prototype first, so the snippet parses on its own
    header = ".version 8.0\n.target sm_50\n.address_size 64\n"
    text = header + _without_header(print_module(ir.Module("8.0", ("sm_50",), 64, [_prototype(target)]))) \
        + "\n" + "\n".join(lines) + "\n"
    return next(f for f in parse_module(text, f"adapter {name}").functions() if f.name == name)


def _param_declaration(p: ir.Param, name: str) -> str:
    align = f".align {p.align} " if p.align else ""
    vector = f".v{p.vector} " if p.vector else ""
    dims = "".join(f"[{d}]" for d in p.array_dims)
    return f".param {align}{vector}.{p.type} {name}{dims};"


def _without_header(text: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if not line.startswith((".version", ".target", ".address_size")))



@dataclass
class _Placed:
    """What the output holds so far."""

    defined: set[str] = field(default_factory=set)     # global definitions
    declared: set[str] = field(default_factory=set)    # prototypes and system-call declarations
    shared: dict[str, int] = field(default_factory=dict)   # .extern .shared name -> index in the output
    input: int = 0                                       # the input being emitted


def _rewrite(item, renames: dict[str, str], files: dict[int, int]):
    """`item` with local symbols renamed and `.loc` file numbers renumbered."""
    if isinstance(item, ir.VarDecl):
        return _rewrite_var(item, renames)
    fn = item.clone()
    fn.name = renames.get(fn.name, fn.name)
    if fn.body is not None:
        _rewrite_block(fn.body, renames, files)
    return fn


def _rewrite_var(v: ir.VarDecl, renames: dict[str, str]) -> ir.VarDecl:
    init = _rewrite_init(v.init, renames) if v.init is not None else None
    return replace(v, name=renames.get(v.name, v.name), init=init)


def _rewrite_init(init, renames):
    if isinstance(init, ir.SymbolAddress):
        return replace(init, name=renames.get(init.name, init.name))
    if isinstance(init, ir.InitList):
        return ir.InitList(tuple(_rewrite_init(x, renames) for x in init.items))
    return init


def _rewrite_block(block: ir.Block, renames: dict[str, str], files: dict[int, int]) -> None:
    def operand(op):
        if isinstance(op, ir.Symbol) and op.name in renames:
            return ir.Symbol(renames[op.name])
        return op

    statements = block.statements
    for k, s in enumerate(statements):
        if isinstance(s, ir.Instruction):
            if renames:
                statements[k] = ir.map_operands(s, operand)
        elif isinstance(s, ir.Block):
            _rewrite_block(s, renames, files)
        elif isinstance(s, ir.Loc):
            statements[k] = ir.Loc(files.get(s.file, s.file), s.line, s.column)
        elif isinstance(s, ir.VarDecl):
            statements[k] = _rewrite_var(s, renames)
        elif isinstance(s, ir.CallTargets):
            statements[k] = ir.CallTargets(s.name, tuple(renames.get(f, f) for f in s.functions))
