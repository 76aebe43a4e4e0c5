"""Scheduling policies by name (`tally-server --policy NAME`)."""
from __future__ import annotations

import inspect
from typing import Callable

from tally.scheduler.policies.fifo import FifoPolicy
from tally.scheduler.policies.kernel_priority import KernelPriorityPolicy
from tally.scheduler.policies.priority import PriorityPolicy
from tally.scheduler.policies.time_slice import TimeSlicePolicy
from tally.scheduler.policy import SchedulingPolicy

POLICIES: dict[str, Callable[..., SchedulingPolicy]] = {
    "fifo": FifoPolicy,
    "kernel-priority": KernelPriorityPolicy,
    "time-slice": TimeSlicePolicy,
    "priority": PriorityPolicy,
}


def make_policy(name: str, **options) -> SchedulingPolicy:
    """A fresh policy; options go to its constructor (e.g. time-slice's quantum_ms)."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown scheduling policy {name!r}; choose one of {', '.join(POLICIES)}")
    accepted = set(inspect.signature(factory).parameters)
    unknown = set(options) - accepted
    if unknown:
        raise ValueError(f"policy {name!r} takes no option(s) {', '.join(sorted(unknown))}; "
                         f"it accepts: {', '.join(sorted(accepted)) or 'none'}")
    return factory(**options)
