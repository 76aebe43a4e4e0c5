"""What a loader does for a module whose variables the relocation pass moved out
(ptx_passes/passes/relocate_globals.py), on any backend: where each variable
goes in one block of storage, the bytes it starts with, and the table of
addresses the module's kernels read them through.

The cuda backend (tally/backends/cuda_globals.py) places the block in a
virtual-memory reservation; the pass tests place it in emulator memory and run
the rewritten kernels there. Both use these functions, so what the tests check
is what a GPU gets.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ptx_passes import parse_module, print_module
from ptx_passes.passes import PassRefused
from ptx_passes.passes.relocate_globals import Relocation, module_variables, relocate_globals
from ptx_passes.text_memo import memo_by_ptx_bytes
from tally.backends.emulator.layout import LayoutError, encode_initializer, var_align, var_size

# Each variable starts on this boundary at least: a cache line, like the driver's own placement.
MIN_ALIGN = 128


@dataclass(frozen=True)
class PlacedVariable:
    name: str
    offset: int      # from the start of the module's block
    size: int        # bytes the job may use (at least 1)


@dataclass
class RelocatedModule:
    """A module's relocated PTX and where its variables go in its block (`nbytes` long)."""

    ptx: str
    relocation: Relocation
    variables: tuple[PlacedVariable, ...]
    nbytes: int

    @property
    def table(self) -> str:
        return self.relocation.table

    def addresses(self, base: int) -> dict[str, int]:
        return {v.name: base + v.offset for v in self.variables}

    def initial_bytes(self, addresses: dict[str, int]) -> dict[str, bytes]:
        """name -> the bytes it starts with (its initializer, addresses of other variables
        resolved to `addresses`)."""
        return {v.name: encode_initializer(v.decl, addresses.__getitem__) for v in self.relocation.variables}

    def table_bytes(self, addresses: dict[str, int]) -> bytes:
        slots = sorted(self.relocation.variables, key=lambda v: v.slot)
        return b"".join(struct.pack("<Q", addresses[v.name]) for v in slots) or bytes(8)


# A line declaring a .global/.const variable (instructions name those spaces after a dot:
# `ld.global`, never at the start of a line).
_DECLARATION = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern|common)[ \t]+)*\.(?:global|const)[ \t]", re.MULTILINE)


def has_variables(ptx: str) -> bool:
    """Cheap test before parsing: can this PTX declare a .global or .const variable?
    (A module without one loads untouched, for the cost of this search.)"""
    return _DECLARATION.search(ptx) is not None


# About 100 MiB of parsed modules at most (ptx_passes/text_memo.py)
RELOCATED_PTX_BYTES = 8 << 20


@memo_by_ptx_bytes(RELOCATED_PTX_BYTES)
def relocate(ptx: str) -> RelocatedModule | None:
    """The module relocated, or None when it has no variables; PassRefused (why) or
    LayoutError when its variables cannot be moved. Remembered: parsing costs about
    5 ms per KiB of PTX, and the same module comes again (every job of a program,
    a job migrating back). Callers must not change what it returns."""
    module = parse_module(ptx, "<module>")
    if not module_variables(module):
        return None
    relocation = relocate_globals(module)
    placed, offset = [], 0
    for v in relocation.variables:
        try:
            size, align = max(var_size(v.decl), 1), max(var_align(v.decl), MIN_ALIGN)
        except LayoutError as e:
            raise PassRefused(f"{v.name}: {e}") from None
        offset = -(-offset // align) * align
        placed.append(PlacedVariable(v.name, offset, size))
        offset += size
    return RelocatedModule(print_module(relocation.module), relocation, tuple(placed), max(offset, 1))
