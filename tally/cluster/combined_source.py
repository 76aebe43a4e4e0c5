"""NVML's figures completed by tally's own accounting: the server's metrics source
on a GPU. NVML measures the device (utilization, clocks, memory, temperature,
power, XIDs) but not SM activity, nor whose work kept the SMs busy; tally's
accounting (tally.cluster.executor_source) knows both. A field the device source
measured is kept; a field it left out (None) is taken from the accounting's sample
of the same moment. Times are the device source's.
"""
from __future__ import annotations

from dataclasses import fields, replace

from tally.cluster.device_metrics import DeviceSample, MetricsSource

_FILLED = tuple(f.name for f in fields(DeviceSample) if f.name not in ("t", "xid_errors"))


class CombinedSource:
    def __init__(self, device: MetricsSource, accounting: MetricsSource):
        self.device, self.accounting = device, accounting
        self.name = f"{device.name} + {accounting.name}"

    def sample(self) -> DeviceSample | None:
        measured = self.device.sample()
        counted = self.accounting.sample()
        if measured is None or counted is None:
            return measured or counted
        missing = {name: getattr(counted, name) for name in _FILLED
                   if getattr(measured, name) is None and getattr(counted, name) is not None}
        return replace(measured, **missing) if missing else measured

    def close(self) -> None:
        self.device.close()
        self.accounting.close()
