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
not line up with the bodies found, or the skeleton does not parse, the module is
parsed whole, which reports any error exactly.
"""
from __future__ import annotations

import re

from . import ir
from .errors import PtxParseError, SourceLocator
from .lexer import END, tokenize

_COMMENT = r"//[^\n]*|/\*(?:[^*]|\*(?!/))*\*/"
_SCAN = re.compile(_COMMENT + r'|"(?:[^"\\\n]|\\.)*"|[{};]')
_COMMENTS = re.compile(_COMMENT)
_FUNCTION_ITEM = re.compile(r"(?:^|\s)\.(?:entry|func)\s")
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


def parse_with_lazy_bodies(text: str, source_name: str) -> ir.Module:
    from .parser import _Parser, parse_module

    spans = body_spans(text)
    if not spans:
        return parse_module(text, source_name)
    pieces, last = [], 0
    for start, end in spans:
        pieces += [text[last:start], "{", "\n" * text.count("\n", start, end), "}"]
        last = end
    pieces.append(text[last:])
    try:
        module = _Parser("".join(pieces), source_name).module()
    except PtxParseError:
        return parse_module(text, source_name)      # its error, located in the real text
    defined = [i for i, item in enumerate(module.items) if isinstance(item, ir.Function) and item.body is not None]
    if len(defined) != len(spans):
        return parse_module(text, source_name)
    locator = SourceLocator(text, source_name)
    for index, span in zip(defined, spans):
        fn = module.items[index]
        module.items[index] = ir.LazyFunction(
            fn.name, fn.kind, fn.linkage, fn.params, fn.return_params, fn.directives,
            parse_body=_body_parser(text, source_name, locator, span, fn), source=text, span=span)
    return module


def _body_parser(text: str, source_name: str, locator: SourceLocator, span: tuple[int, int], fn: ir.Function):
    params, return_params = fn.params, fn.return_params

    def parse() -> ir.Block:
        from .parser import _Parser

        start, end = span
        tokens = tokenize(text[start:end], source_name, base=start, locator=locator)
        parser = _Parser(text, source_name, tokens)
        try:
            body = parser.function_body(params, return_params)
        except RecursionError:
            raise PtxParseError("input nests too deeply to parse", 1, 1, "", source_name) from None
        if parser.kinds[parser.i] != END:
            raise parser.error(f"unexpected {parser.describe()} after the body of {fn.name}")
        return body

    return parse
