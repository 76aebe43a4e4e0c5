"""PTX toolkit: parse PTX to an IR (ptx_passes.ir), print it back, read fatbins and
rewrite kernels (slicing, unified synchronization, PTB preemption).

    from ptx_passes import parse_module, print_module
    module = parse_module(ptx_text, "kernels.ptx")
    text = print_module(module)
"""
from .errors import PtxParseError
from .parser import parse_module
from .printer import print_module

__all__ = ["PtxParseError", "parse_module", "print_module"]
