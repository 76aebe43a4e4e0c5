"""The one exception the PTX front end raises for bad input, and source positions for it."""
from __future__ import annotations

import bisect

_EXCERPT_WIDTH = 120


class PtxParseError(ValueError):
    """Malformed or unsupported PTX, with where it happened.

    `line` and `column` are 1-based; `excerpt` is (a window of) the offending
    source line and `caret` the 1-based column of the error inside the excerpt.
    str(error) reads `name:line:col: message`, then the excerpt and a caret.
    """

    def __init__(self, message: str, line: int, column: int, excerpt: str = "",
                 source_name: str = "<ptx>", caret: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        self.excerpt = excerpt
        self.source_name = source_name
        self.caret = column if caret is None else caret
        super().__init__(self._format())

    def one_line(self) -> str:
        """`name:line:col: message`, for command-line output."""
        return f"{self.source_name}:{self.line}:{self.column}: {self.message}"

    def _format(self) -> str:
        if not self.excerpt:
            return self.one_line()
        return f"{self.one_line()}\n  {self.excerpt}\n  {' ' * (self.caret - 1)}^"


class SourceLocator:
    """Turns character offsets into line/column. Built lazily: only errors need it."""

    def __init__(self, text: str, source_name: str = "<ptx>"):
        self.text = text
        self.source_name = source_name
        self._line_starts: list[int] | None = None

    def line_col(self, pos: int) -> tuple[int, int]:
        if self._line_starts is None:
            starts = [0]
            find = self.text.find
            i = find("\n")
            while i >= 0:
                starts.append(i + 1)
                i = find("\n", i + 1)
            self._line_starts = starts
        pos = max(0, min(pos, len(self.text)))
        index = bisect.bisect_right(self._line_starts, pos) - 1
        return index + 1, pos - self._line_starts[index] + 1

    def error(self, message: str, pos: int) -> PtxParseError:
        line, column = self.line_col(pos)
        start = pos - (column - 1)
        end = self.text.find("\n", start)
        # Tabs would misplace the caret: show them as one space each.
        text = self.text[start:end if end >= 0 else len(self.text)].replace("\t", " ")
        lo = max(0, min(column - 1 - _EXCERPT_WIDTH // 2, len(text) - _EXCERPT_WIDTH))
        excerpt = text[lo:lo + _EXCERPT_WIDTH].rstrip("\r")
        return PtxParseError(message, line, column, excerpt, self.source_name, caret=column - lo)
