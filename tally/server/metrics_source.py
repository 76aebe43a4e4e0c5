"""Where the server's device samples come from (dynamic SM, compute control,
SysProbe, /metrics all read the same samples):

- tally-server --metrics-trace FILE: a recorded trace, replayed at its own pace
  (tally.cluster.trace_source), for demos and tests;
- a backend NVML can read (its traits' nvml_metrics: a real GPU): NVML's figures,
  with SM activity and the high-priority jobs' share of it from tally's own
  accounting (tally.cluster.combined_source); where NVML cannot start, the log says
  so once and the accounting alone is used;
- any other backend (emulator, sim, null): tally's own accounting of the work it
  ran and the backend's memory figures (tally.cluster.executor_source).
"""
from __future__ import annotations

import logging
import uuid

from tally.cluster.combined_source import CombinedSource
from tally.cluster.device_metrics import MetricsSource
from tally.cluster.executor_source import ExecutorActivitySource
from tally.cluster.trace_source import TraceSource

log = logging.getLogger("tally.server")


def make_metrics_source(config, backend, executor) -> MetricsSource:
    if config.metrics_trace is not None:
        return TraceSource(config.metrics_trace, realtime=config.metrics_trace_realtime)
    accounting = ExecutorActivitySource(executor, backend.mem_info)
    if not backend.traits.nvml_metrics:
        return accounting
    from tally.cluster.nvml_source import NvmlSource, NvmlUnavailable

    device = f"GPU-{uuid.UUID(bytes=bytes(backend.describe().uuid))}"
    try:
        return CombinedSource(NvmlSource(device), accounting)
    except NvmlUnavailable as e:
        log.warning("device metrics: %s; using tally's own accounting of the work it runs (no temperature, "
                    "power, clock or XID readings for SysProbe)", e)
        return accounting
