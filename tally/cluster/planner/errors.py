"""The planner's one error type for input it cannot plan with."""
from __future__ import annotations


class PlanInputError(ValueError):
    """Bad or unsatisfiable planner input. The message names what is wrong and
    what to do; `tally-plan` prints it and exits 2."""
