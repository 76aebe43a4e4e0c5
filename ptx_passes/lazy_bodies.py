"""Parsing a big module with its function bodies parsed at their first use.

Libraries ship their kernels as one module, and a job runs a handful of them: CuPy's
CUB module is 21 MB of PTX in 383 functions; parsing all of it took 7.5 s and about
500 MB of memory on a 2-core VM for a job whose one reduction used one kernel. Here
the module is parsed with every function body blanked out (the skeleton: header,
variables and function signatures, each body kept as its newlines so lines keep
their numbers), and each function becomes an ir.LazyFunction whose body the same
parser reads from the module's text when something first asks for it. A body's
tokens carry their positions in the whole text, so its errors name the module's
line and column.

Bodies are found by one scan for braces outside comments and strings: a `{` at
module scope opens a body when the item it starts (since the last `;` or `}` at
module scope) is a `.entry` or `.func` (an initializer's follows `=` in a variable
declaration, a DWARF section's follows `.section`). Where the skeleton's functions do
not line up with the bodies found, or the skeleton does not parse, the parser parses
the module whole, which reports any error exactly (parser.py: _parse_lazily).
"""
from __future__ import annotations

import functools
import re
from typing import Callable

from . import ir

_COMMENT = r"//[^\n]*|/\*(?:[^*]|\*(?!/))*\*/"
_SCAN = re.compile(_COMMENT + r'|"(?:[^"\\\n]|\\.)*"|[{};]')
_COMMENTS = re.compile(_COMMENT)
_FUNCTION_ITEM = re.compile(r"(?:^|\s)\.(?:entry|func)(?=[\s(])")
_SECTION_ITEM = re.compile(r"(?:^|\s)\.section\s")


def body_spans(text: str) -> list[tuple[int, int]] | None:
    """(start of `{`, end after `}`) of each function body at module scope, in order;
    None when the braces do not balance."""
    spans: list[tuple[int, int]] = []
    depth, item_start, body_start = 0, 0, -1
    for m in _SCAN.finditer(text):
        c = m.group()
        if c == "{":
            if depth == 0:
                head = _COMMENTS.sub(" ", text[item_start:m.start()])
                is_body = _FUNCTION_ITEM.search(head) and not _SECTION_ITEM.search(head) and \
                    not head.rstrip().endswith("=")
                body_start = m.start() if is_body else -1
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                if body_start >= 0:
                    spans.append((body_start, m.end()))
                body_start, item_start = -1, m.end()
        elif c == ";" and depth == 0:
            item_start = m.end()
    return spans if depth == 0 else None


def skeleton(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each body in `spans` reduced to its braces and newlines."""
    pieces, last = [], 0
    for start, end in spans:
        pieces += [text[last:start], "{", "\n" * text.count("\n", start, end), "}"]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def attach_lazy_bodies(module: ir.Module, text: str, spans: list[tuple[int, int]],
                       parse_body: Callable[[tuple[int, int], ir.Function], ir.Block]) -> bool:
    """Make each function the skeleton defines an ir.LazyFunction of its span of `text`,
    read by parse_body(span, function); False (the module unchanged) when the skeleton's
    definitions are not the spans found."""
    defined = [i for i, item in enumerate(module.items) if isinstance(item, ir.Function) and item.body is not None]
    if len(defined) != len(spans):
        return False
    for index, span in zip(defined, spans):
        fn = module.items[index]
        module.items[index] = ir.LazyFunction(
            fn.name, fn.kind, fn.linkage, fn.params, fn.return_params, fn.directives,
            parse_body=functools.partial(parse_body, span, fn), source=text, span=span)
    return True
