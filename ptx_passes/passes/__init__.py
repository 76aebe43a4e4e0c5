"""The kernel transformations, one module per pass, plus the helpers they share.

Each pass rewrites one kernel (`ir.Function`) in place and assumes the pipeline
cloned it first and ran the safety check; a pass that meets something it
cannot transform anyway raises `PassRefused` rather than emit wrong code.
Every pass module has a VERSION that goes into the transform cache's key:
bump it whenever the pass's output changes.

    safety.py        refusal reasons per kernel and pass (reports only)
    slicing.py       <kernel>__tally_slice: runs a contiguous range of blocks
    unified_sync.py  every barrier and return through one barrier.red point
    ptb.py           persistent worker blocks with a task counter and preempt flag
    relocate_globals.py  a module's variables moved out to storage the loader places
                     (a module-wide pass, for the cuda backend's --suspendable)

and the helpers they share: barriers.py (decoding CTA barriers), callgraph.py
(functions a kernel reaches), special_regs.py (rebuilding %ctaid/%nctaid),
scopes.py (flattening nested scopes), warp_sync.py (warp operations that a
returning thread could block), kernel_code.py (parameters, names, insertion).
"""
from .errors import PassRefused

__all__ = ["PassRefused"]
