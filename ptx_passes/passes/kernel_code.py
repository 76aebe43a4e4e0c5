"""Small edits every pass makes to a kernel: where its code starts, extra launch
parameters behind the original ones, loads of those parameters, and fresh
names for the symbols a pass declares."""
from __future__ import annotations

from ..ir import (Block, Function, Instruction, Module, NameAllocator, Param, RegDecl, Register,
                  VarDecl, addr, instr)
from ..launch_plan import EXTRA_PARAMS_ALIGN

_DECLARATIONS = (RegDecl, VarDecl)


def code_start(body: Block) -> int:
    """Index of the first statement of `body` that is not a declaration: code inserted
    there runs once, before anything the kernel does (labels included, so no loop
    of the kernel can jump back over it)."""
    i = 0
    statements = body.statements
    while i < len(statements) and isinstance(statements[i], _DECLARATIONS):
        i += 1
    return i


def insert_at_code_start(body: Block, code: list[Instruction]) -> None:
    at = code_start(body)
    body.statements[at:at] = code


class KernelNames(NameAllocator):
    """ir.NameAllocator (fresh `%tally_*` registers, `$__tally_*` labels) plus readable
    symbol names for the parameters and variables a pass declares."""

    def __init__(self, function: Function, module: Module | None = None):
        super().__init__(function, module)
        self._symbols: set[str] = set()

    def new_symbol(self, stem: str) -> str:
        """`stem`, or `stem_1`, `stem_2`, ... if the kernel or module already uses it."""
        name, n = stem, 0
        while self.is_taken(name) or name in self._symbols:
            n += 1
            name = f"{stem}_{n}"
        self._symbols.add(name)
        return name


def append_extra_params(kernel: Function, names: KernelNames,
                        fields: list[tuple[str, str]]) -> list[Param]:
    """Append launch-plan parameters (name stem, type) after the kernel's own. The first
    one is `.align 8`, so the extras start at launch_plan.extra_params_offset(original
    bytes) whatever the original parameters' size; the rest pack naturally."""
    params = []
    for i, (stem, type_) in enumerate(fields):
        align = EXTRA_PARAMS_ALIGN if i == 0 else None
        params.append(Param(names.new_symbol(f"{kernel.name}_param_{stem}"), type_, align=align))
    kernel.params.extend(params)
    return params


def load_param(names: NameAllocator, param: Param, hint: str) -> tuple[Register, Instruction]:
    """A fresh register and the `ld.param` that fills it from `param`."""
    width = {"u32": "b32", "u64": "b64"}[param.type]
    register = names.new_register(width, hint)
    return register, instr(f"ld.param.{param.type}", register, addr(param.name))


def functions_by_name(module: Module) -> dict[str, Function]:
    """Name -> function, preferring a definition (with a body) over a declaration."""
    out: dict[str, Function] = {}
    for f in module.functions():
        if f.name not in out or (out[f.name].body is None and f.body is not None):
            out[f.name] = f
    return out
