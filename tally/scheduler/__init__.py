"""Scheduling: the stream executor every client operation goes through, the
policies that decide when kernels run, and the transparent profiler."""
from tally.scheduler.clock import Clock, WallClock
from tally.scheduler.executor import BE_TRANSFORMS, ClientGone, StreamExecutor
from tally.scheduler.events import ExecutorEvent
from tally.scheduler.ops import (EventRecord, GatedCallback, HostCallback, HostGate, Launch, MemcpyDtoD,
                                 MemcpyDtoH, MemcpyHtoD, Memset, Op, StreamWaitEvent)
from tally.scheduler.policies import POLICIES, make_policy
from tally.scheduler.policy import BEST_EFFORT, HIGH
from tally.scheduler.profile_cache import ProfileCache, default_cache_directory
from tally.scheduler.profiler import DEFAULT_TURNAROUND_THRESHOLD_MS, RunConfig, TransparentProfiler
from tally.scheduler.run_mode import RunMode
from tally.scheduler.variants import PTBVariant, SlicedVariant, VariantProvider

__all__ = [
    "BE_TRANSFORMS", "BEST_EFFORT", "ClientGone", "Clock", "DEFAULT_TURNAROUND_THRESHOLD_MS", "EventRecord",
    "ExecutorEvent", "GatedCallback", "HIGH", "HostCallback", "HostGate", "Launch", "MemcpyDtoD", "MemcpyDtoH", "MemcpyHtoD",
    "Memset", "Op", "POLICIES", "PTBVariant", "ProfileCache", "RunConfig", "RunMode", "SlicedVariant",
    "StreamExecutor", "StreamWaitEvent", "TransparentProfiler", "VariantProvider", "WallClock",
    "default_cache_directory", "make_policy",
]
