"""Device metrics from NVML (nvidia-ml-py's `pynvml`), the metrics source on a real GPU.

Read at each sample, for one device (NVML's index, as nvidia-smi numbers GPUs, or
its UUID "GPU-..."):
  GPU utilization      nvmlDeviceGetUtilizationRates().gpu      -> gpu_util_percent
  SM clock, its max    nvmlDeviceGetClockInfo / GetMaxClockInfo(NVML_CLOCK_SM)
  memory used, total   nvmlDeviceGetMemoryInfo()
  temperature          nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
  power, its limit     nvmlDeviceGetPowerUsage / GetEnforcedPowerLimit (mW -> W)
  critical XIDs        events of type nvmlEventTypeXidCriticalError, registered once
                       (nvmlEventSetCreate, nvmlDeviceRegisterEvents) and collected
                       without blocking (nvmlEventSetWait_v2 with a 0 ms timeout)
NVML has no SM activity (DCGM's SM_ACTIVE); the server fills sm_active_percent
from tally's own accounting.

A query the device does not support (NVML_ERROR_NOT_SUPPORTED, or no permission)
gives None, as does any other failing query (logged once per query), so one
missing figure never stops sampling. The exception is NVML_ERROR_GPU_IS_LOST:
the device is gone, and `sample()` raises DeviceLost for the server to act on.
A device that cannot deliver XID events (`xid_events` False) reports none.

Without a driver (no libnvidia-ml) or without nvidia-ml-py, construction raises
NvmlUnavailable saying which source to use instead. `readings_to_sample` is the
mapping from NVML's figures to a DeviceSample, a pure function.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from tally.cluster.device_metrics import DeviceSample

try:
    import pynvml
except ImportError:                  # pragma: no cover - nvidia-ml-py is in the cuda and test extras
    pynvml = None

log = logging.getLogger("tally.health")

MAX_XID_EVENTS_PER_SAMPLE = 64       # a storm of events must not stall the sampling loop


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no driver, no nvidia-ml-py, no such device)."""


class DeviceLost(RuntimeError):
    """NVML reports the GPU lost (fallen off the bus): no further sample is possible."""


@dataclass(frozen=True)
class NvmlReadings:
    """One round of NVML queries in NVML's own units; None: not supported."""

    gpu_util_percent: int | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: int | None = None
    power_mw: int | None = None
    power_limit_mw: int | None = None
    xids: tuple[int, ...] = ()


def readings_to_sample(t: float, r: NvmlReadings) -> DeviceSample:
    """NVML's figures as a DeviceSample (power in W; a 0 maximum clock, total or
    limit, which some virtual GPUs report, is no figure)."""
    def watts(mw):
        return None if mw is None else mw / 1000.0

    def nonzero(v):
        return v if v else None

    return DeviceSample(
        t=t,
        gpu_util_percent=None if r.gpu_util_percent is None else float(r.gpu_util_percent),
        sm_clock_mhz=None if r.sm_clock_mhz is None else float(r.sm_clock_mhz),
        sm_clock_max_mhz=None if not r.sm_clock_max_mhz else float(r.sm_clock_max_mhz),
        memory_used_bytes=r.memory_used_bytes,
        memory_total_bytes=nonzero(r.memory_total_bytes),
        temperature_c=None if r.temperature_c is None else float(r.temperature_c),
        power_w=watts(r.power_mw),
        power_limit_w=watts(nonzero(r.power_limit_mw)),
        xid_errors=tuple(r.xids),
    )


def query(name: str, fn: Callable, *args, failed: set[str] | None = None):
    """fn(*args), or None when the device cannot answer it (see the module docstring).
    `failed` collects the names of queries whose unexpected failure was logged."""
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        if e.value == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise DeviceLost(f"NVML: the GPU is lost ({name}: {e}); it has fallen off the bus or stopped "
                             f"answering, and needs a reset or a reboot") from None
        if e.value not in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION,
                           pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            if failed is not None and name not in failed:
                failed.add(name)
                log.warning("NVML %s failed (%s); reported as not measured", name, e)
        return None


class NvmlSource:
    """A MetricsSource on NVML for one device. `clock` gives each sample's time."""

    def __init__(self, device: int | str = 0, clock: Callable[[], float] = time.monotonic):
        if pynvml is None:
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install 'tally[cuda]'); without NVML, use "
                                  "the backend's own accounting or a recorded trace (tally.cluster.trace_source)")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise NvmlUnavailable(
                f"NVML cannot start ({e}): no NVIDIA driver here? Device metrics from NVML need a GPU and its "
                f"driver; on the emulator or sim backends use the backend's own accounting, and for tests and "
                f"demos a recorded trace (tally.cluster.trace_source.TraceSource)") from None
        self.clock = clock
        self._failed: set[str] = set()
        self._events = None
        try:
            self._handle = self._open(device)
            self.name = f"nvml {device} ({_text(query('name', pynvml.nvmlDeviceGetName, self._handle))})"
            self.xid_events = self._register_xid_events()
        except BaseException:
            self.close()
            raise

    def _open(self, device: int | str):
        try:
            if isinstance(device, str) and device.startswith("GPU-"):
                return pynvml.nvmlDeviceGetHandleByUUID(device)
            return pynvml.nvmlDeviceGetHandleByIndex(int(device))
        except pynvml.NVMLError as e:
            count = query("device count", pynvml.nvmlDeviceGetCount)
            raise NvmlUnavailable(f"NVML has no GPU {device!r} ({e}); it sees {count} GPU(s), numbered from 0 "
                                  f"as nvidia-smi lists them, or give a UUID GPU-...") from None

    def _register_xid_events(self) -> bool:
        supported = query("supported event types", pynvml.nvmlDeviceGetSupportedEventTypes, self._handle)
        if not supported or not supported & pynvml.nvmlEventTypeXidCriticalError:
            log.info("%s: the device delivers no XID events; fatal XIDs will not be seen", self.name)
            return False
        try:
            self._events = pynvml.nvmlEventSetCreate()
            pynvml.nvmlDeviceRegisterEvents(self._handle, pynvml.nvmlEventTypeXidCriticalError, self._events)
            return True
        except pynvml.NVMLError as e:
            log.warning("%s: cannot register for XID events (%s); fatal XIDs will not be seen", self.name, e)
            self._free_events()
            return False

    def read(self) -> NvmlReadings:
        h, failed = self._handle, self._failed
        util = query("utilization", pynvml.nvmlDeviceGetUtilizationRates, h, failed=failed)
        memory = query("memory info", pynvml.nvmlDeviceGetMemoryInfo, h, failed=failed)
        return NvmlReadings(
            gpu_util_percent=None if util is None else util.gpu,
            sm_clock_mhz=query("SM clock", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM, failed=failed),
            sm_clock_max_mhz=query("max SM clock", pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM,
                                   failed=failed),
            memory_used_bytes=None if memory is None else memory.used,
            memory_total_bytes=None if memory is None else memory.total,
            temperature_c=query("temperature", pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU,
                                failed=failed),
            power_mw=query("power", pynvml.nvmlDeviceGetPowerUsage, h, failed=failed),
            power_limit_mw=query("power limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h, failed=failed),
            xids=self._poll_xids(),
        )

    def _poll_xids(self) -> tuple[int, ...]:
        if self._events is None:
            return ()
        xids = []
        for _ in range(MAX_XID_EVENTS_PER_SAMPLE):
            try:
                event = pynvml.nvmlEventSetWait_v2(self._events, 0)
            except pynvml.NVMLError as e:
                if e.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise DeviceLost(f"NVML: the GPU is lost (waiting for XID events: {e})") from None
                if e.value != pynvml.NVML_ERROR_TIMEOUT and "xid events" not in self._failed:
                    self._failed.add("xid events")
                    log.warning("NVML XID event wait failed (%s)", e)
                break
            if event.eventType & pynvml.nvmlEventTypeXidCriticalError:
                xids.append(int(event.eventData))
        return tuple(xids)

    def sample(self) -> DeviceSample:
        return readings_to_sample(self.clock(), self.read())

    def close(self) -> None:
        if pynvml is None or getattr(self, "_closed", False):
            return
        self._closed = True
        self._free_events()
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass

    def _free_events(self) -> None:
        if self._events is not None:
            try:
                pynvml.nvmlEventSetFree(self._events)
            except pynvml.NVMLError:
                pass
            self._events = None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "unknown")
