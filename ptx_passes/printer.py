"""IR -> PTX text, deterministic and laid out like nvcc's output (tabs, labels at
column 0, one declaration per line). The text parses back to an equal IR and
is accepted by ptxas whenever the input was.
"""
from __future__ import annotations

from . import ir


def print_module(module: ir.Module) -> str:
    out: list[str] = [f".version {module.version}", f".target {', '.join(module.targets)}"]
    if module.address_size is not None:
        out.append(f".address_size {module.address_size}")
    out.append("")
    for item in module.items:
        if isinstance(item, ir.Function):
            if out[-1]:
                out.append("")
            _function(item, out)
        elif isinstance(item, ir.VarDecl):
            out.append(format_var_decl(item))
        elif isinstance(item, ir.FileDirective):
            out.append(_file_directive(item))
        elif isinstance(item, ir.Section):
            _section(item, out)
        elif isinstance(item, ir.Pragma):
            out.append(f'.pragma "{item.text}";')
        else:
            raise TypeError(f"cannot print module item {item!r}")
    out.append("")
    return "\n".join(out)


def format_param(p: ir.Param) -> str:
    parts = [f".{p.space}"]
    if p.align is not None:
        parts.append(f".align {p.align}")
    if p.vector is not None:
        parts.append(f".v{p.vector}")
    parts.append(f".{p.type}")
    if p.ptr:
        parts.append(".ptr")
        if p.ptr_space is not None:
            parts.append(f".{p.ptr_space}")
        if p.ptr_align is not None:
            parts.append(f".align {p.ptr_align}")
    parts.append(p.name + _dims(p.array_dims))
    return " ".join(parts)


def format_var_decl(v: ir.VarDecl) -> str:
    parts = [f".{x}" for x in v.linkage]
    parts.append(f".{v.space}")
    if v.attributes:
        parts.append(".attribute(" + ", ".join(f".{a}" for a in v.attributes) + ")")
    if v.align is not None:
        parts.append(f".align {v.align}")
    if v.vector is not None:
        parts.append(f".v{v.vector}")
    parts.append(f".{v.type}")
    parts.append(v.name + _dims(v.array_dims))
    text = " ".join(parts)
    if v.init is not None:
        text += " = " + _initializer(v.init)
    return text + ";"


def _dims(dims: tuple[int | None, ...]) -> str:
    return "".join("[]" if d is None else f"[{d}]" for d in dims)


def _initializer(init: ir.Initializer) -> str:
    if isinstance(init, ir.InitList):
        return "{" + ", ".join(_initializer(i) for i in init.items) + "}"
    if isinstance(init, ir.SymbolAddress):
        text = f"generic({init.name})" if init.generic else init.name
        if init.offset:
            text += f"+{init.offset}" if init.offset > 0 else f"-{-init.offset}"
        return text
    return init.text


def _join_tokens(tokens: tuple[str, ...]) -> str:
    """Token texts back to source: a space between tokens, none before a comma."""
    text = ""
    for t in tokens:
        text += t if (t == "," or not text) else " " + t
    return text


def _file_directive(f: ir.FileDirective) -> str:
    text = f'\t.file\t{f.index} "{f.path}"'
    if f.extra:
        rest = _join_tokens(f.extra)
        text += rest if rest.startswith(",") else " " + rest
    return text


def _section(s: ir.Section, out: list[str]) -> None:
    out.append(f"\t.section\t.{s.name}")
    out.append("\t{")
    for e in s.entries:
        if isinstance(e, ir.Label):
            out.append(f"{e.name}:")
        else:
            out.append(f".{e.type} {','.join(e.values)}")
    out.append("\t}")


def _function(fn: ir.Function, out: list[str]) -> None:
    head = " ".join(f".{x}" for x in fn.linkage + (fn.kind,))
    if fn.return_params is not None:
        head += " (" + ", ".join(format_param(p) for p in fn.return_params) + ")"
    head += f" {fn.name}"
    if fn.params:
        out.append(head + "(")
        last = len(fn.params) - 1
        for i, p in enumerate(fn.params):
            out.append("\t" + format_param(p) + ("," if i < last else ""))
        out.append(")")
    else:
        out.append(head + "()")
    for d in fn.directives:
        out.append(_function_directive(d))
    if fn.body is None:
        out.append(";")
        return
    out.append("{")
    _statements(fn.body, 1, out)
    out.append("}")
    out.append("")


def _function_directive(d: ir.FunctionDirective) -> str:
    if not d.args:
        return f".{d.name}"
    text = f".{d.name} " + ", ".join(str(a) for a in d.args)
    return text + ";" if d.name == "pragma" else text


def _statements(block: ir.Block, depth: int, out: list[str]) -> None:
    indent = "\t" * depth
    append = out.append
    fmt = ir.Instruction.__str__
    in_declarations = True
    for index, s in enumerate(block.statements):
        t = type(s)
        if in_declarations and t is not ir.RegDecl and t is not ir.VarDecl:
            # nvcc's layout: a blank line between a body's declarations and its code.
            in_declarations = False
            if depth == 1 and index > 0:
                append("")
        if t is ir.Instruction:
            append(indent + fmt(s))
        elif t is ir.RegDecl:
            append(indent + _reg_decl(s))
        elif t is ir.Label:
            if out[-1]:
                append("")
            append(f"{s.name}:")
        elif t is ir.Loc:
            text = f"{indent}.loc\t{s.file} {s.line} {s.column}"
            append(text + _join_tokens(s.extra) if s.extra else text)
        elif t is ir.Block:
            append(indent + "{")
            _statements(s, depth + 1, out)
            append(indent + "}")
        elif t is ir.VarDecl:
            append(indent + format_var_decl(s))
        elif t is ir.Pragma:
            append(f'{indent}.pragma "{s.text}";')
        elif t is ir.BranchTargets:
            append(f"{s.name}: .branchtargets {', '.join(s.labels)};")
        elif t is ir.CallTargets:
            append(f"{s.name}: .calltargets {', '.join(s.functions)};")
        elif t is ir.CallPrototype:
            append(indent + _call_prototype(s))
        else:
            raise TypeError(f"cannot print statement {s!r}")


def _reg_decl(r: ir.RegDecl) -> str:
    parts = [".reg"]
    if r.align is not None:
        parts.append(f".align {r.align}")
    if r.vector is not None:
        parts.append(f".v{r.vector}")
    parts.append(f".{r.type}")
    name = r.name if r.count is None else f"{r.name}<{r.count}>"
    return " ".join(parts) + f" \t{name};"


def _call_prototype(p: ir.CallPrototype) -> str:
    text = f"{p.name}: .callprototype "
    if p.return_params is not None:
        text += "(" + ", ".join(format_param(x) for x in p.return_params) + ") "
    text += "_ (" + ", ".join(format_param(x) for x in p.params) + ")"
    if p.noreturn:
        text += " .noreturn"
    return text + ";"
