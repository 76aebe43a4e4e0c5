"""How a kernel runs on the device: the one name for it that the executor, the
device layer, the profiler, the policies' views and the sim's variant functions
share."""
from __future__ import annotations

import enum


class RunMode(enum.Enum):
    WHOLE = "whole"      # the kernel as the job launched it, all its blocks at once
    SLICE = "slice"      # sub-grids of its blocks, one launch each (ptx_passes slicing)
    PTB = "ptb"          # persistent workers taking its blocks as tasks; preemptible

    # Members are singletons, equal only to themselves: hash them by identity, in C,
    # rather than by Enum's hash of the name in Python (they key dicts on the launch path).
    __hash__ = object.__hash__


# The members as plain module names: `mode is WHOLE` costs a global lookup, where
# `RunMode.WHOLE` goes through the enum class's attribute lookup (several times
# slower, and the launch path compares modes a dozen times per kernel).
WHOLE, SLICE, PTB = RunMode.WHOLE, RunMode.SLICE, RunMode.PTB
