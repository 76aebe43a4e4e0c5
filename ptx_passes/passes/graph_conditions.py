"""cudaGraphSetConditional as tally's own store (a module-wide pass).

A kernel sets a conditional graph node's value with `cudaGraphSetConditional(handle,
value)`, an external function the driver provides at load time (nvcc's PTX
declares it `.extern .func`; a cubin leaves it an undefined symbol). Under tally a
handle is the device address of the node's 32-bit condition value, which the
client allocated and reads when the graph reaches the node
(client_preload/src/graphs/conditional_nodes.cpp). This pass gives the module a
definition of its own in place of the declaration: one 32-bit store of `value` to
`handle`. Every backend then runs the call the same way: the emulator, and on a
GPU the driver's JIT, which would otherwise link NVIDIA's implementation, made for
the driver's handles and not tally's.
"""
from __future__ import annotations

from .. import ir
from ..parser import parse_module

VERSION = 1
NAME = "cudaGraphSetConditional"

_DEFINITION = f"""
.func {NAME}(.param .b64 tally_handle, .param .b32 tally_value)
{{
  .reg .b64 %tally_rd<1>;
  .reg .b32 %tally_r<1>;
  ld.param.b64 %tally_rd0, [tally_handle];
  ld.param.b32 %tally_r0, [tally_value];
  st.global.u32 [%tally_rd0], %tally_r0;
  ret;
}}
"""


def sets_conditions(module: ir.Module) -> bool:
    """Whether the module declares cudaGraphSetConditional without defining it."""
    return any(f.name == NAME and f.body is None for f in module.functions())


def define_set_conditional(module: ir.Module) -> bool:
    """Replaces the module's declaration of cudaGraphSetConditional with tally's
    definition (in place, where the declaration was, so every call follows it);
    False when the module has no such declaration."""
    for i, item in enumerate(module.items):
        if isinstance(item, ir.Function) and item.name == NAME and item.body is None:
            if len(item.params) != 2 or item.return_params:
                raise ValueError(f"{NAME} is declared with {len(item.params)} parameters"
                                 f"{' and a return value' if item.return_params else ''}; CUDA's takes "
                                 f"(handle, value) and returns nothing")
            header = f".version {module.version}\n.target {', '.join(module.targets)}\n.address_size 64\n"
            [definition] = parse_module(header + _DEFINITION, "<tally cudaGraphSetConditional>").functions()
            module.items[i] = definition
            return True
    return False
