"""What the kernels of a module can reach: the module's items less the functions
no kernel calls, directly, through another function or through a function's
address (an operand, `.calltargets`, a variable's initializer). The linker uses it
so that references only unreachable code makes need not resolve."""
from __future__ import annotations

from . import ir


def reachable_items(items: list, log: list[str]) -> list:
    """`items` less the functions no kernel can reach (and the declarations only they
    used). Kernels and defined variables are kept: the host names them (launches,
    cuModuleGetGlobal), and what they name is reached from them."""
    by_name: dict[str, list] = {}
    for item in items:
        if isinstance(item, (ir.Function, ir.VarDecl)):
            by_name.setdefault(item.name, []).append(item)
    pending = [i for i in items if (isinstance(i, ir.Function) and i.is_entry)
               or (isinstance(i, ir.VarDecl) and "extern" not in i.linkage)]
    reached = {i.name for i in pending}
    while pending:
        for name in names_used(pending.pop()):
            if name in by_name and name not in reached:
                reached.add(name)
                pending.extend(by_name[name])
    kept = [i for i in items if not isinstance(i, (ir.Function, ir.VarDecl)) or i.name in reached]
    dropped = sum(1 for i in items if isinstance(i, ir.Function) and i.body is not None and i.name not in reached)
    if dropped:
        log.append(f"left out {dropped} function(s) that no kernel calls")
    return kept


def names_used(item) -> set[str]:
    """Every symbol name `item` mentions (operands, call targets, initializers)."""
    names: set[str] = set()
    if isinstance(item, ir.VarDecl):
        _initializer_names(item.init, names)
        return names
    if item.body is None:
        return names

    def collect(op):
        if isinstance(op, ir.Symbol):
            names.add(op.name)
        return op

    for _block, _i, s in ir.iter_statements(item.body):
        if isinstance(s, ir.Instruction):
            ir.map_operands(s, collect)
        elif isinstance(s, ir.CallTargets):
            names.update(s.functions)
        elif isinstance(s, ir.VarDecl):
            _initializer_names(s.init, names)
    return names


def _initializer_names(init, names: set[str]) -> None:
    if isinstance(init, ir.SymbolAddress):
        names.add(init.name)
    elif isinstance(init, ir.InitList):
        for x in init.items:
            _initializer_names(x, names)
