"""Modules whose kernels set conditional graph nodes' values.

Under tally a conditional node's handle is the device address of its condition
value (client_preload/src/graphs/conditional_nodes.cpp), so a module that calls
cudaGraphSetConditional gets tally's definition of it in place of the driver's
(ptx_passes/passes/graph_conditions.py) and is loaded from that PTX alone: its
cubins would link the driver's implementation, made for the driver's handles.
A module that sets conditions from cubins only cannot be changed; it loads as it
is, with a warning, and its conditions are not seen on a GPU.
"""
from __future__ import annotations

import logging

from ptx_passes.errors import PtxParseError
from ptx_passes.parser import parse_module
from ptx_passes.passes.graph_conditions import NAME, define_set_conditional
from ptx_passes.printer import print_module
from tally.backends.base import ModuleSource
from tally.protocol.errors import CUDA_ERROR_INVALID_PTX, DeviceError

log = logging.getLogger("tally.server")


def with_own_set_conditional(source: ModuleSource, runs_cubins: bool) -> ModuleSource:
    """`source` itself, or, for a module whose PTX calls cudaGraphSetConditional,
    its PTX with tally's definition and nothing else."""
    if source.ptx is None or NAME not in source.ptx:
        if runs_cubins and any(NAME.encode() in cubin for cubin in source.cubins.values()):
            log.warning("a module sets graph conditions (%s) from cubins only; tally's conditional handles "
                        "need its PTX, so on a GPU its conditional nodes will not see the values it sets", NAME)
        return source
    try:
        module = parse_module(source.ptx)
        changed = define_set_conditional(module)
    except (PtxParseError, ValueError) as e:
        raise DeviceError(CUDA_ERROR_INVALID_PTX, f"a module calling {NAME}: {e}") from None
    if not changed:
        return source
    log.info("a module sets graph conditions: it is loaded from its PTX, with tally's %s", NAME)
    return ModuleSource(original=b"", ptx=print_module(module))
