"""PTX text -> IR (ptx_passes.ir): a hand-written recursive-descent parser over
the token lists of ptx_passes.lexer.

Grammar covered (PTX ISA 9.0 as nvcc, NVRTC and Triton emit it): module header
(.version/.target/.address_size), .file/.section/.pragma, module variables in
every state space with linkage, alignment, vectors, arrays and initializers,
.entry/.func with parameters, return parameters and performance directives,
bodies with nested scopes, register/variable declarations, labels, jump
tables and call prototypes, .loc and instructions with guards, modifiers and
every operand form listed in ir.py. Anything else is a PtxParseError that
names the line and column; no other exception escapes `parse_module`.
"""
from __future__ import annotations

import re
import struct

from . import ir
from .errors import PtxParseError, SourceLocator
from .lazy_bodies import attach_lazy_bodies, body_spans, skeleton
from .lexer import END, tokenize

_MAX_NESTING = 64

_SPECIAL_REGISTERS = frozenset({
    "%tid", "%ntid", "%laneid", "%warpid", "%nwarpid", "%ctaid", "%nctaid", "%smid", "%nsmid",
    "%gridid", "%is_explicit_cluster", "%clusterid", "%nclusterid", "%cluster_ctaid",
    "%cluster_nctaid", "%cluster_ctarank", "%cluster_nctarank", "%lanemask_eq", "%lanemask_le",
    "%lanemask_lt", "%lanemask_ge", "%lanemask_gt", "%clock", "%clock_hi", "%clock64",
    "%globaltimer", "%globaltimer_lo", "%globaltimer_hi", "%reserved_smem_offset_begin",
    "%reserved_smem_offset_end", "%reserved_smem_offset_cap", "%reserved_smem_offset_0",
    "%reserved_smem_offset_1", "%total_smem_size", "%aggr_smem_size", "%dynamic_smem_size",
    "%current_graph_exec",
})
_SPECIAL_NUMBERED = re.compile(r"%(?:envreg(?:[0-9]|[12][0-9]|3[01])|pm[0-7](?:_64)?)")
# Special registers that are 4-vectors read one component at a time (%tid.x).
_SPECIAL_VECTORS = frozenset({"%tid", "%ntid", "%ctaid", "%nctaid", "%clusterid", "%nclusterid",
                              "%cluster_ctaid", "%cluster_nctaid"})
_COMPONENTS = {".x": "x", ".y": "y", ".z": "z"}

_LINKAGE = frozenset({".extern", ".visible", ".weak", ".common"})
_VAR_SPACES = frozenset({".global", ".shared", ".const", ".local", ".param", ".tex"})
_FUNCTION_DIRECTIVES = frozenset({
    ".maxntid", ".reqntid", ".minnctapersm", ".maxnctapersm", ".maxnreg", ".noreturn",
    ".pragma", ".explicitcluster", ".reqnctapercluster", ".maxclusterrank",
    ".blocksareclusters", ".abi_preserve", ".abi_preserve_control",
})
_VECTOR_PREFIX = {".v2": 2, ".v4": 4, ".v8": 8}
_LOC_CLAUSES = {"function_name": 1, "inlined_at": 3}


def parse_module(text: str, source_name: str = "<ptx>", *, lazy_bodies: bool = False) -> ir.Module:
    """Parse a PTX module. Raises PtxParseError (only) on malformed or unsupported input.
    With `lazy_bodies`, function bodies are parsed at their first use (lazy_bodies.py):
    errors inside a body are raised then, not here."""
    if not isinstance(text, str):
        raise TypeError(f"parse_module takes PTX text (str), not {type(text).__name__}; "
                        "decode bytes first")
    if lazy_bodies:
        return _parse_lazily(text, source_name)
    try:
        return _Parser(text, source_name).module()
    except PtxParseError:
        raise
    except RecursionError:
        raise PtxParseError("input nests too deeply to parse", 1, 1, "", source_name) from None


def _parse_lazily(text: str, source_name: str) -> ir.Module:
    """The module with its function bodies parsed at first use (lazy_bodies.py); parsed
    whole where the skeleton does not parse or line up (that parse names any error)."""
    spans = body_spans(text)
    if not spans:
        return parse_module(text, source_name)
    try:
        module = _Parser(skeleton(text, spans), source_name).module()
    except PtxParseError:
        return parse_module(text, source_name)
    locator = SourceLocator(text, source_name)

    def parse_body(span: tuple[int, int], fn: ir.Function) -> ir.Block:
        start, end = span
        parser = _Parser(text, source_name, tokenize(text[start:end], source_name, base=start, locator=locator))
        try:
            body = parser.function_body(fn.params, fn.return_params)
        except RecursionError:
            raise PtxParseError("input nests too deeply to parse", 1, 1, "", source_name) from None
        if parser.kinds[parser.i] != END:
            raise parser.error(f"unexpected {parser.describe()} after the body of {fn.name}")
        return body

    if not attach_lazy_bodies(module, text, spans, parse_body):
        return parse_module(text, source_name)
    return module


class _Parser:
    def __init__(self, text: str, source_name: str, tokens=None):
        tokens = tokens or tokenize(text, source_name)
        self.kinds = tokens.kinds
        self.texts = tokens.texts
        self.starts = tokens.starts
        self.locator = tokens.locator
        self.i = 0
        # Scope stack of plain (no %) register names declared with .reg; ranges kept aside.
        self.scopes: list[set[str]] = []
        self.range_scopes: list[list[ir.RegDecl]] = []
        # Per function: label-like names, and instructions holding Symbol operands that may
        # turn out to be labels declared later in the function.
        self.label_names: set[str] = set()
        self.symbol_users: list[tuple[list, int]] = []
        self.depth = 0
        # %-registers are interned: most operands are registers, and equal values may share.
        self.percent_registers: dict[str, ir.Register] = {}

    # ------------------------------------------------------------------ token helpers

    def error(self, message: str, index: int | None = None) -> PtxParseError:
        i = self.i if index is None else index
        return self.locator.error(message, self.starts[min(i, len(self.starts) - 1)])

    def describe(self, i: int | None = None) -> str:
        i = self.i if i is None else i
        if self.kinds[i] == END:
            return "end of input"
        return repr(self.texts[i])

    # A STR token's text keeps its quotes and EOF's text is "", so comparing texts alone
    # never mistakes them for punctuation or directives.
    def expect(self, text: str, what: str | None = None) -> None:
        if self.texts[self.i] != text:
            raise self.error(f"expected {what or repr(text)}, found {self.describe()}")
        self.i += 1

    def accept(self, text: str) -> bool:
        if self.texts[self.i] == text:
            self.i += 1
            return True
        return False

    def identifier(self, what: str) -> str:
        if self.kinds[self.i] != "ID":
            raise self.error(f"expected {what}, found {self.describe()}")
        self.i += 1
        return self.texts[self.i - 1]

    def integer(self, what: str = "an integer") -> int:
        negative = self.accept("-")
        if self.kinds[self.i] != "INT":
            raise self.error(f"expected {what}, found {self.describe()}")
        value = self._int_value(self.texts[self.i], self.i)
        self.i += 1
        return -value if negative else value

    def _int_value(self, text: str, index: int) -> int:
        digits = text[:-1] if text[-1] == "U" else text
        try:
            if digits[:2] in ("0x", "0X"):
                return int(digits[2:], 16)
            if digits[:2] in ("0b", "0B"):
                return int(digits[2:], 2)
            if len(digits) > 1 and digits[0] == "0":
                return int(digits[1:], 8)
            return int(digits)
        except ValueError:
            raise self.error(f"malformed integer literal {text!r}", index) from None

    def string(self, what: str) -> str:
        if self.kinds[self.i] != "STR":
            raise self.error(f"expected {what} (a quoted string), found {self.describe()}")
        self.i += 1
        return self.texts[self.i - 1][1:-1]

    # ------------------------------------------------------------------ module

    def module(self) -> ir.Module:
        self.expect(".version", "the .version directive at the start of the module")
        if self.kinds[self.i] != "FLT" or not re.fullmatch(r"[0-9]+\.[0-9]+", self.texts[self.i]):
            raise self.error(f"expected a version number like 9.0 after .version, found {self.describe()}")
        version = self.texts[self.i]
        self.i += 1
        self.expect(".target", "the .target directive after .version")
        targets = [self.identifier("a target such as sm_80")]
        while self.accept(","):
            targets.append(self.identifier("a target such as sm_80"))
        address_size = None
        if self.accept(".address_size"):
            address_size = self.integer("the address size (32 or 64)")
            if address_size not in (32, 64):
                raise self.error(f".address_size must be 32 or 64, not {address_size}", self.i - 1)
        module = ir.Module(version, tuple(targets), address_size)
        items = module.items
        while self.kinds[self.i] != END:
            text = self.texts[self.i]
            if self.kinds[self.i] != "DIR":
                raise self.error(f"expected a declaration or directive at module scope, found {self.describe()}")
            if text == ".file":
                items.append(self.file_directive())
            elif text == ".section":
                items.append(self.section())
            elif text == ".pragma":
                items.append(self.pragma())
            else:
                self.declaration_or_function(items)
        return module

    def file_directive(self) -> ir.FileDirective:
        self.i += 1
        index = self.integer("the file index of .file")
        path = self.string("the file name of .file")
        extra: list[str] = []
        while True:
            if self.kinds[self.i] == "STR":
                extra.append(self.texts[self.i])
                self.i += 1
            elif self.texts[self.i] == "," and self.kinds[self.i + 1] in ("INT", "STR"):
                extra += [",", self.texts[self.i + 1]]
                self.i += 2
            else:
                break
        return ir.FileDirective(index, path, tuple(extra))

    def section(self) -> ir.Section:
        self.i += 1
        if self.kinds[self.i] != "DIR":
            raise self.error(f"expected a section name such as .debug_info, found {self.describe()}")
        name = self.texts[self.i][1:]
        self.i += 1
        self.expect("{", "'{' to open the section")
        entries: list[ir.SectionData | ir.Label] = []
        while not self.accept("}"):
            kind = self.kinds[self.i]
            if kind == "ID" and self.texts[self.i + 1] == ":":
                entries.append(ir.Label(self.texts[self.i]))
                self.i += 2
            elif kind == "DIR":
                dtype = self.texts[self.i][1:]
                self.i += 1
                values = [self.section_value()]
                while self.accept(","):
                    values.append(self.section_value())
                entries.append(ir.SectionData(dtype, tuple(values)))
            else:
                raise self.error(f"expected a label, a data directive or '}}' in section .{name}, "
                                 f"found {self.describe()}")
        return ir.Section(name, tuple(entries))

    def section_value(self) -> str:
        parts = []
        while True:
            if self.kinds[self.i] not in ("INT", "ID", "DIR", "HEXF"):
                raise self.error(f"expected a value in section data, found {self.describe()}")
            parts.append(self.texts[self.i])
            self.i += 1
            if self.texts[self.i] in ("+", "-") and self.kinds[self.i] == "P":
                parts.append(self.texts[self.i])
                self.i += 1
            else:
                return "".join(parts)

    def pragma(self) -> ir.Pragma:
        self.i += 1
        text = self.string("the pragma text")
        self.expect(";", "';' after .pragma")
        return ir.Pragma(text)

    # ------------------------------------------------------------------ declarations

    def linkage(self) -> tuple[str, ...]:
        out = []
        while self.texts[self.i] in _LINKAGE and self.kinds[self.i] == "DIR":
            out.append(self.texts[self.i][1:])
            self.i += 1
        return tuple(out)

    def declaration_or_function(self, items: list) -> None:
        start = self.i
        linkage = self.linkage()
        text = self.texts[self.i]
        if text in (".entry", ".func"):
            items.append(self.function(linkage))
        elif text in _VAR_SPACES:
            items.extend(self.var_decls(linkage))
        else:
            what = "after the linkage directive" if self.i > start else "at module scope"
            raise self.error(f"unexpected {self.describe()} {what}: expected .entry, .func or a "
                             "variable declaration (.global, .shared, .const, ...)")

    def attribute_list(self) -> list[str]:
        self.expect("(", "'(' after .attribute")
        attrs = []
        while not self.accept(")"):
            if self.kinds[self.i] != "DIR":
                raise self.error(f"expected an attribute such as .managed, found {self.describe()}")
            attrs.append(self.texts[self.i][1:])
            self.i += 1
            self.accept(",")
        return attrs

    def var_decls(self, linkage: tuple[str, ...]) -> list[ir.VarDecl]:
        space = self.texts[self.i][1:]
        self.i += 1
        align = vector = dtype = None
        attributes: list[str] = []
        while self.kinds[self.i] == "DIR":
            t = self.texts[self.i]
            self.i += 1
            if t == ".align":
                align = self.integer("the alignment after .align")
            elif t in _VECTOR_PREFIX:
                vector = _VECTOR_PREFIX[t]
            elif t == ".attribute":
                attributes += self.attribute_list()
            elif t[1:] in ir.TYPE_NAMES and dtype is None:
                dtype = t[1:]
            elif t == ".ptr" and space == "param":
                raise self.error(".ptr attributes are only valid on kernel parameters", self.i - 1)
            else:
                raise self.error(f"unexpected {t!r} in a .{space} declaration", self.i - 1)
        if dtype is None:
            raise self.error(f"expected a type (.b8, .u32, .f32, ...) in the .{space} declaration, "
                             f"found {self.describe()}")
        decls = []
        while True:
            name = self.identifier(f"the name of the .{space} variable")
            dims = self.array_dims()
            init = None
            if self.accept("="):
                init = self.initializer(0)
            decls.append(ir.VarDecl(space, dtype, name, linkage, align, vector, dims, init,
                                    tuple(attributes)))
            if not self.accept(","):
                break
        self.expect(";", "';' at the end of the declaration")
        return decls

    def array_dims(self) -> tuple[int | None, ...]:
        dims: list[int | None] = []
        while self.accept("["):
            if self.accept("]"):
                dims.append(None)
                continue
            n = self.integer("an array size")
            if n < 0:
                raise self.error("array sizes cannot be negative", self.i - 1)
            dims.append(n)
            self.expect("]", "']' after the array size")
        return tuple(dims)

    def initializer(self, depth: int) -> ir.Initializer:
        if depth > _MAX_NESTING:
            raise self.error("initializer nests too deeply")
        if self.accept("{"):
            items = []
            if not self.accept("}"):
                while True:
                    items.append(self.initializer(depth + 1))
                    if self.accept("}"):
                        break
                    self.expect(",", "',' or '}' in the initializer list")
            return ir.InitList(tuple(items))
        kind = self.kinds[self.i]
        if kind == "ID":
            generic = False
            if self.texts[self.i] == "generic" and self.texts[self.i + 1] == "(":
                self.i += 2
                name = self.identifier("a variable name inside generic()")
                self.expect(")", "')' after generic(name")
                generic = True
            else:
                name = self.texts[self.i]
                self.i += 1
            offset = 0
            if self.texts[self.i] in ("+", "-") and self.kinds[self.i] == "P":
                sign = -1 if self.texts[self.i] == "-" else 1
                self.i += 1
                offset = sign * self.integer("an offset after the symbol")
            return ir.SymbolAddress(name, offset, generic)
        return self.number("an initial value")

    # ------------------------------------------------------------------ functions

    def function(self, linkage: tuple[str, ...]) -> ir.Function:
        kind = self.texts[self.i][1:]
        self.i += 1
        if self.texts[self.i] == ".attribute":
            raise self.error("function .attribute(...) is not supported")
        return_params = None
        if kind == "func" and self.texts[self.i] == "(":
            return_params = self.param_list("return parameter")
        name = self.identifier(f"the name of the .{kind}")
        params: list[ir.Param] = []
        if self.texts[self.i] == "(":
            params = self.param_list("parameter")
        directives = self.function_directives()
        fn = ir.Function(name, kind, linkage, params, return_params, directives)
        if self.accept(";"):
            return fn
        if self.texts[self.i] != "{":
            raise self.error(f"expected '{{' (the body) or ';' after the .{kind} {name} header, "
                             f"found {self.describe()}")
        fn.body = self.function_body(params, return_params)
        return fn

    def function_body(self, params: list[ir.Param], return_params: list[ir.Param] | None) -> ir.Block:
        self.label_names = set()
        self.symbol_users = []
        # .func parameters in .reg space are registers inside the body.
        self.scopes.append({p.name for p in params + (return_params or []) if p.space == "reg"})
        self.range_scopes.append([])
        body = self.block()
        self.scopes.pop()
        self.range_scopes.pop()
        self.resolve_labels()
        return body

    def param_list(self, what: str) -> list[ir.Param]:
        self.expect("(", f"'(' to open the {what} list")
        params = []
        if self.accept(")"):
            return params
        while True:
            params.append(self.param(what))
            if self.accept(")"):
                return params
            self.expect(",", f"',' or ')' in the {what} list")

    def param(self, what: str) -> ir.Param:
        space_text = self.texts[self.i]
        if space_text not in (".param", ".reg"):
            raise self.error(f"expected a {what} (.param or .reg), found {self.describe()}")
        self.i += 1
        align = vector = dtype = ptr_space = ptr_align = None
        ptr = False
        while self.kinds[self.i] == "DIR":
            t = self.texts[self.i]
            self.i += 1
            if t == ".align":
                value = self.integer("the alignment after .align")
                if ptr:
                    ptr_align = value
                else:
                    align = value
            elif t == ".ptr":
                ptr = True
            elif ptr and t[1:] in ir.STATE_SPACES:
                ptr_space = t[1:]
            elif t in _VECTOR_PREFIX:
                vector = _VECTOR_PREFIX[t]
            elif t[1:] in ir.TYPE_NAMES and dtype is None:
                dtype = t[1:]
            else:
                raise self.error(f"unexpected {t!r} in a {what} declaration", self.i - 1)
        if dtype is None:
            raise self.error(f"expected the {what}'s type (.u32, .b8, ...), found {self.describe()}")
        name = self.identifier(f"the {what}'s name")
        dims = self.array_dims()
        return ir.Param(name, dtype, space_text[1:], align, vector, dims, ptr, ptr_space, ptr_align)

    def function_directives(self) -> list[ir.FunctionDirective]:
        out = []
        while self.kinds[self.i] == "DIR" and self.texts[self.i] in _FUNCTION_DIRECTIVES:
            name = self.texts[self.i][1:]
            self.i += 1
            args: list[int | str] = []
            if name == "pragma":
                args.append(self.texts[self.i])
                self.string("the pragma text")
                while self.accept(","):
                    args.append(self.texts[self.i])
                    self.string("the pragma text")
                self.accept(";")
            elif self.kinds[self.i] == "INT":
                args.append(self.integer())
                while self.accept(","):
                    args.append(self.integer(f"a number in .{name}"))
            out.append(ir.FunctionDirective(name, tuple(args)))
        return out

    def resolve_labels(self) -> None:
        labels = self.label_names
        if not labels:
            return

        def relabel(op):
            if type(op) is ir.Symbol and op.name in labels:
                return ir.LabelRef(op.name)
            return op

        for statements, index in self.symbol_users:
            statements[index] = ir.map_operands(statements[index], relabel)

    # ------------------------------------------------------------------ blocks

    def block(self) -> ir.Block:
        open_index = self.i
        self.expect("{")
        self.depth += 1
        if self.depth > _MAX_NESTING:
            raise self.error(f"blocks nest more than {_MAX_NESTING} deep", open_index)
        self.scopes.append(set())
        self.range_scopes.append([])
        statements: list = []
        kinds, texts = self.kinds, self.texts
        while True:
            kind = kinds[self.i]
            text = texts[self.i]
            if kind == "ID":
                if texts[self.i + 1] == ":" and kinds[self.i + 1] == "P":
                    self.labelled(statements)
                else:
                    self.instruction(statements, None)
            elif kind == "P":
                if text == "@":
                    self.instruction(statements, self.guard())
                elif text == "}":
                    self.i += 1
                    break
                elif text == "{":
                    statements.append(self.block())
                elif text == ";":
                    self.i += 1  # empty statement
                else:
                    raise self.error(f"unexpected {text!r} at the start of a statement")
            elif kind == "DIR":
                self.directive_statement(statements)
            elif kind == END:
                raise self.error(f"unexpected end of input: the block opened at line "
                                 f"{self.locator.line_col(self.starts[open_index])[0]} is not closed")
            else:
                raise self.error(f"unexpected {self.describe()} at the start of a statement")
        self.scopes.pop()
        self.range_scopes.pop()
        self.depth -= 1
        return ir.Block(statements)

    def directive_statement(self, statements: list) -> None:
        text = self.texts[self.i]
        if text == ".reg":
            statements.extend(self.reg_decls())
        elif text == ".loc":
            statements.append(self.loc())
        elif text == ".pragma":
            statements.append(self.pragma())
        elif text in _VAR_SPACES or text in _LINKAGE:
            linkage = self.linkage()
            if self.texts[self.i] not in _VAR_SPACES:
                raise self.error(f"expected a variable declaration after the linkage, found {self.describe()}")
            statements.extend(self.var_decls(linkage))
        else:
            raise self.error(f"unexpected directive {text!r} inside a function body")

    def reg_decls(self) -> list[ir.RegDecl]:
        self.i += 1
        align = vector = dtype = None
        while self.kinds[self.i] == "DIR":
            t = self.texts[self.i]
            self.i += 1
            if t == ".align":
                align = self.integer("the alignment after .align")
            elif t in _VECTOR_PREFIX:
                vector = _VECTOR_PREFIX[t]
            elif t[1:] in ir.TYPE_NAMES and dtype is None:
                dtype = t[1:]
            else:
                raise self.error(f"unexpected {t!r} in a .reg declaration", self.i - 1)
        if dtype is None:
            raise self.error(f"expected the register type (.b32, .pred, ...), found {self.describe()}")
        decls = []
        while True:
            name = self.identifier("a register name")
            count = None
            if self.accept("<"):
                count = self.integer("the register count inside <>")
                if count < 0:
                    raise self.error("a register count cannot be negative", self.i - 1)
                self.expect(">", "'>' after the register count")
            decl = ir.RegDecl(dtype, name, count, vector, align)
            if name[0] != "%":
                if count is None:
                    self.scopes[-1].add(name)
                else:
                    self.range_scopes[-1].append(decl)
            decls.append(decl)
            if not self.accept(","):
                break
        self.expect(";", "';' after the .reg declaration")
        return decls

    def loc(self) -> ir.Loc:
        self.i += 1
        file_index = self.integer("the file index of .loc")
        line = self.integer("the line number of .loc")
        column = self.integer("the column of .loc") if self.kinds[self.i] == "INT" else 0
        extra: list[str] = []
        while self.texts[self.i] == "," and self.texts[self.i + 1] in _LOC_CLAUSES:
            clause = self.texts[self.i + 1]
            extra += [",", clause]
            self.i += 2
            for _ in range(_LOC_CLAUSES[clause]):
                if self.kinds[self.i] not in ("ID", "INT"):
                    raise self.error(f"expected an operand of {clause} in .loc, found {self.describe()}")
                extra.append(self.texts[self.i])
                self.i += 1
        return ir.Loc(file_index, line, column, tuple(extra))

    def labelled(self, statements: list) -> None:
        name = self.texts[self.i]
        self.i += 2
        self.label_names.add(name)
        text = self.texts[self.i]
        if text == ".branchtargets" or text == ".calltargets":
            self.i += 1
            names = [self.identifier("a label name")]
            while self.accept(","):
                names.append(self.identifier("a label name"))
            self.expect(";", f"';' after {text}")
            node = ir.BranchTargets if text == ".branchtargets" else ir.CallTargets
            statements.append(node(name, tuple(names)))
        elif text == ".callprototype":
            statements.append(self.call_prototype(name))
        else:
            statements.append(ir.Label(name))

    def call_prototype(self, name: str) -> ir.CallPrototype:
        self.i += 1
        return_params = None
        if self.texts[self.i] == "(":
            return_params = tuple(self.param_list("return parameter"))
        if self.texts[self.i] != "_":
            raise self.error(f"expected '_' (the function placeholder) in .callprototype, found {self.describe()}")
        self.i += 1
        params: tuple[ir.Param, ...] = ()
        if self.texts[self.i] == "(":
            params = tuple(self.param_list("parameter"))
        noreturn = self.accept(".noreturn")
        self.expect(";", "';' after .callprototype")
        return ir.CallPrototype(name, return_params, params, noreturn)

    # ------------------------------------------------------------------ instructions

    def guard(self) -> ir.Guard:
        self.i += 1
        negated = self.accept("!")
        name = self.identifier("a predicate register after '@'")
        return ir.Guard(ir.Register(name), negated)

    def instruction(self, statements: list, guard: ir.Guard | None) -> None:
        kinds, texts = self.kinds, self.texts
        start = self.i
        opcode = texts[start]
        if kinds[start] != "ID":
            raise self.error(f"expected an instruction after the guard, found {self.describe()}")
        if opcode not in ir.KNOWN_OPCODES:
            if opcode[0].isalpha() and opcode.islower():
                raise self.error(f"unknown instruction {opcode!r} (not a PTX ISA 9.0 opcode)")
            raise self.error(f"expected an instruction, a label or a declaration, found {opcode!r}")
        self.i += 1
        i = self.i
        modifiers = []
        while kinds[i] == "DIR":
            modifiers.append(texts[i][1:])
            i += 1
        self.i = i
        operands = []
        has_symbol = False
        if texts[i] != ";" or kinds[i] != "P":
            while True:
                op = self.operand(0)
                if type(op) is not ir.Register:
                    has_symbol = has_symbol or _mentions_symbol(op)
                operands.append(op)
                if self.accept(";"):
                    break
                if texts[self.i] != ",":
                    raise self.error(f"expected ',' or ';' after an operand of {opcode}, "
                                     f"found {self.describe()}")
                self.i += 1
        else:
            self.i = i + 1
        line = self.locator.line_col(self.starts[start])[0]
        if has_symbol:
            self.symbol_users.append((statements, len(statements)))
        statements.append(ir.Instruction(opcode, tuple(modifiers), tuple(operands), guard, line))

    def operand(self, depth: int) -> ir.Operand:
        kind = self.kinds[self.i]
        text = self.texts[self.i]
        if kind == "ID":
            self.i += 1
            op = self.name_operand(text)
            if self.texts[self.i] == "|" and self.kinds[self.i] == "P":
                self.i += 1
                second = self.identifier("the second destination after '|'")
                op = ir.PredPair(op, self.name_operand(second))
            return op
        if kind in ("INT", "HEXF", "FLT"):
            return self.number("an operand")
        if kind == "P":
            if depth > _MAX_NESTING:
                raise self.error("operands nest too deeply")
            if text == "[":
                return self.address()
            if text == "{":
                return self.vector(depth)
            if text == "(":
                self.i += 1
                items = []
                if not self.accept(")"):
                    while True:
                        items.append(self.operand(depth + 1))
                        if self.accept(")"):
                            break
                        self.expect(",", "',' or ')' in the operand list")
                return ir.ParenList(tuple(items))
            if text == "!":
                self.i += 1
                return ir.Negated(ir.Register(self.identifier("a predicate register after '!'")))
            if text == "-":
                return self.number("an operand")
        raise self.error(f"expected an operand, found {self.describe()}")

    def name_operand(self, name: str) -> ir.Operand:
        if name[0] == "%":
            register = self.percent_registers.get(name)
            if register is not None:
                return register
            if name in _SPECIAL_REGISTERS or _SPECIAL_NUMBERED.fullmatch(name):
                component = None
                if name in _SPECIAL_VECTORS and self.kinds[self.i] == "DIR":
                    component = _COMPONENTS.get(self.texts[self.i])
                    if component is None:
                        raise self.error(f"expected .x, .y or .z after {name}, found {self.describe()}")
                    self.i += 1
                return ir.SpecialReg(name, component)
            register = self.percent_registers[name] = ir.Register(name)
            return register
        if name == "_":
            return ir.Sink()
        if self.is_plain_register(name):
            return ir.Register(name)
        return ir.Symbol(name)

    def is_plain_register(self, name: str) -> bool:
        for scope in self.scopes:
            if name in scope:
                return True
        for ranges in self.range_scopes:
            for decl in ranges:
                if decl.declares(name):
                    return True
        return False

    def address(self) -> ir.Address:
        self.i += 1
        base = None
        offset = 0
        written = False
        kind = self.kinds[self.i]
        if kind == "ID":
            name = self.texts[self.i]
            self.i += 1
            base = self.name_operand(name)
            if not isinstance(base, (ir.Register, ir.Symbol)):
                raise self.error(f"{name} cannot be used as an address", self.i - 1)
            text = self.texts[self.i]
            if text == "+":
                self.i += 1
                offset = self.integer("an offset after '+'")
                written = True
            elif text == "-":
                offset = self.integer("an offset after '-'")
                written = True
        elif kind == "INT" or self.texts[self.i] == "-":
            offset = self.integer("an address")
        else:
            raise self.error(f"expected a register, a variable or a number inside [ ], found {self.describe()}")
        coordinates = None
        if self.accept(","):
            if self.texts[self.i] != "{":
                raise self.error(f"expected '{{' (coordinates) after ',' in an address, found {self.describe()}")
            coordinates = self.vector(0)
        self.expect("]", "']' to close the address")
        return ir.Address(base, offset, coordinates, written)

    def vector(self, depth: int) -> ir.Vector:
        self.i += 1
        elements = []
        while True:
            elements.append(self.operand(depth + 1))
            if self.accept("}"):
                return ir.Vector(tuple(elements))
            self.expect(",", "',' or '}' in the vector operand")

    def number(self, what: str) -> ir.Immediate:
        negative = self.accept("-")
        kind = self.kinds[self.i]
        text = self.texts[self.i]
        if kind == "INT":
            value: int | float = self._int_value(text, self.i)
        elif kind == "HEXF":
            if text[1] in "fF":
                value = struct.unpack("<f", int(text[2:], 16).to_bytes(4, "little"))[0]
            else:
                value = struct.unpack("<d", int(text[2:], 16).to_bytes(8, "little"))[0]
        elif kind == "FLT":
            value = float(text)
        else:
            raise self.error(f"expected {what}, found {self.describe()}")
        self.i += 1
        if negative:
            return ir.Immediate("-" + text, -value)
        return ir.Immediate(text, value)


def _mentions_symbol(op: ir.Operand) -> bool:
    t = type(op)
    if t is ir.Symbol:
        return True
    if t is ir.Address:
        return type(op.base) is ir.Symbol
    if t is ir.ParenList:
        return any(_mentions_symbol(e) for e in op.items)
    if t is ir.Vector:
        return any(_mentions_symbol(e) for e in op.elements)
    return False
