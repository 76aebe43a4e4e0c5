"""How a kernel runs on the device: the one name for it that the executor, the
device layer, the profiler, the policies' views and the sim's variant functions
share."""
from __future__ import annotations

import enum


class RunMode(enum.Enum):
    WHOLE = "whole"      # the kernel as the job launched it, all its blocks at once
    SLICE = "slice"      # sub-grids of its blocks, one launch each (ptx_passes slicing)
    PTB = "ptb"          # persistent workers taking its blocks as tasks; preemptible
