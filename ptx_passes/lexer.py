"""PTX tokens, from one compiled regular expression.

Each match of `_TOKEN` swallows leading whitespace and comments and then one
token, so tokenizing a module is a single `finditer` pass in C. A character
no token starts with matches the catch-all `ERR` group and becomes a
PtxParseError with its line and column, never silently skipped. Trailing
trivia matches the `EOF` group, which ends the scan (without it the regex
would backtrack into the trivia and report a comment's '/' as an error).

Token kinds:
  ID    identifiers, registers and opcodes: `ld`, `%r1`, `$L__BB0_2`, `_Z3fooPf`, `_`
  DIR   a dot word: directives, types, modifiers and vector components:
        `.reg`, `.u32`, `.x`, `.shared::cta`, `.L2::128B`, `.2d`
  HEXF  float immediates by bit pattern: `0f3F800000`, `0d3FF0000000000000`
  FLT   decimal float literals: `1.5`, `2.`, `1e-3`, `9.0` (also .version numbers)
  INT   integer literals: decimal, `0x1F`, octal `017`, binary `0b101`, optional `U`
  STR   string literals with their quotes: `"nounroll"`
  P     one punctuation character: , ; : { } [ ] ( ) @ ! | + - = < >
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import PtxParseError, SourceLocator

_TRIVIA = r"(?:\s+|//[^\n]*|/\*(?:[^*]|\*(?!/))*\*/)*"
_TOKEN = re.compile(
    _TRIVIA
    + r"(?:"
    r"(?P<ID>[A-Za-z_$][A-Za-z0-9_$]*|%[A-Za-z0-9_$]+)"
    r"|(?P<DIR>\.[A-Za-z0-9_]+(?:::[A-Za-z0-9_]+)*)"
    r"|(?P<HEXF>0[fF][0-9A-Fa-f]{8}|0[dD][0-9A-Fa-f]{16})"
    r"|(?P<INT>0[xX][0-9A-Fa-f]+U?|0[bB][01]+U?|[0-9]+U?(?![.eE0-9]))"
    r"|(?P<FLT>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
    r"|(?P<STR>\"(?:[^\"\\\n]|\\.)*\")"
    r"|(?P<P>[,;:{}\[\]()@!|+\-=<>])"
    r"|(?P<EOF>\Z)"
    r"|(?P<ERR>.)"
    r")",
    re.DOTALL,
)

END = "EOF"


@dataclass(frozen=True)
class Tokens:
    """Parallel lists (fast to index): kinds[i], texts[i], starts[i] (character offset).

    The last entry is always an EOF token at the end of the text.
    """

    kinds: list[str]
    texts: list[str]
    starts: list[int]
    locator: SourceLocator


def tokenize(text: str, source_name: str = "<ptx>", *, base: int = 0,
             locator: SourceLocator | None = None) -> Tokens:
    """`text` may be a piece of a larger text (a function body parsed on its own):
    `base` is where it starts there and `locator` locates positions in the whole."""
    locator = locator or SourceLocator(text, source_name)
    kinds: list[str] = []
    texts: list[str] = []
    starts: list[int] = []
    add_kind, add_text, add_start = kinds.append, texts.append, starts.append
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "EOF":
            break
        if kind == "ERR":
            raise _bad_character(m, text, locator, base)
        add_kind(kind)
        add_text(m[kind])
        add_start(m.start(kind) + base)
    add_kind(END)
    add_text("")
    add_start(len(text) + base)
    return Tokens(kinds, texts, starts, locator)


def _bad_character(m: re.Match, text: str, locator: SourceLocator, base: int) -> PtxParseError:
    pos = m.start("ERR")
    ch = m.group("ERR")
    if text.startswith("/*", pos):
        return locator.error("unterminated /* comment: add the closing */", pos + base)
    if ch == '"':
        return locator.error("unterminated string literal: strings end with \" on the same line", pos + base)
    return locator.error(f"unexpected character {ch!r} (not part of any PTX token)", pos + base)
