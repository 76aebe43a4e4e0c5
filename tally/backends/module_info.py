"""Kernel names and parameter layouts of a module, from its PTX or cubins.

Backends that do not hand the image to a real driver (null, emulator, sim)
still owe the client each kernel's parameter layout (DESIGN.md: "The server
answers the layout when the client resolves a function").
"""
from __future__ import annotations

from tally.backends.base import KernelParam, ModuleSource
from tally.protocol.errors import CUDA_ERROR_INVALID_IMAGE, DeviceError


def kernel_layouts(source: ModuleSource) -> dict[str, tuple[KernelParam, ...]]:
    if source.ptx is not None:
        from ptx_passes import PtxParseError, parse_module
        from ptx_passes.params import param_layout

        try:
            module = parse_module(source.ptx, "<module>")
        except PtxParseError as e:
            raise DeviceError(CUDA_ERROR_INVALID_IMAGE, f"module PTX does not parse: {e}") from None
        return {fn.name: tuple(KernelParam(off, size, align) for off, size, align in param_layout(fn))
                for fn in module.entries()}
    if source.cubins:
        from ptx_passes.cubin_info import kernel_params

        cubin = source.cubins[max(source.cubins)]
        return {name: tuple(KernelParam(off, size) for off, size in params)
                for name, params in kernel_params(cubin).items()}
    raise DeviceError(CUDA_ERROR_INVALID_IMAGE, "module image holds neither PTX nor a cubin")
