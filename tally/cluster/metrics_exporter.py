"""What /metrics shows: a Prometheus collector that reads the server's status
record, its event counters and the latest device sample at scrape time, so the
exporter keeps no second set of books.

Device figures carry the names NVIDIA's DCGM exporter gives them where the
meaning is the same (so dashboards made for it work), in DCGM's units: MiB of
frame buffer, MHz, watts, degrees C, GPU utilization in percent, SM activity as a
ratio. A figure the device sample does not have is left out, never made up.
Everything else is `tally_*`, per client labelled client, pid, priority, program.

The status record is its JSON form ({"server": {...}, "clients": [...]},
tally/server/status.py); keys other branches add (health, per-client SM share,
quota in force, state) are read when present.
"""
from __future__ import annotations

import uuid
from typing import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tally.cluster.device_metrics import DeviceSample

MIB = 1 << 20
CLIENT_LABELS = ["client", "pid", "priority", "program"]
DCGM_LABELS = ["gpu", "UUID", "modelName"]
HEALTH_STATES = ("init", "healthy", "unhealthy", "overlimit", "disabled")
KERNEL_MODES = (("whole", "kernels_whole"), ("sliced", "kernels_sliced"), ("ptb", "kernels_ptb"))


def gpu_uuid(raw: bytes) -> str:
    """The 16 bytes of a device UUID as nvidia-smi and DCGM write it: GPU-xxxxxxxx-...."""
    return "GPU-" + str(uuid.UUID(bytes=bytes(raw)))


class TallyCollector(Collector):
    """`status()`: the status record as JSON; `sample()`: the device's latest
    DeviceSample or None; `counters`: the server's ServerCounters (evictions by
    reason, device faults); `device`: the DCGM labels (gpu, UUID, modelName)."""

    def __init__(self, status: Callable[[], dict], sample: Callable[[], DeviceSample | None], counters,
                 device: dict[str, str]):
        self._status, self._sample, self._counters = status, sample, counters
        self._device = [device[k] for k in DCGM_LABELS]

    def describe(self) -> list[Metric]:
        return []          # the metric set depends on what the server has; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        server, clients = status["server"], status["clients"]
        yield from self._device_metrics(self._sample(), server)
        yield from _client_metrics(clients, server.get("scheduler", {}).get("clients", {}))
        yield from _scheduler_metrics(server.get("scheduler", {}))
        yield from _health_metrics(server.get("health"))
        yield from _mobility_metrics(server.get("mobility"), clients)
        yield from self._event_metrics()

    def _device_metrics(self, s: DeviceSample | None, server: dict) -> Iterator[Metric]:
        s = s or DeviceSample(t=0.0)
        used, total = s.memory_used_bytes, s.memory_total_bytes
        if used is None or total is None:        # the backend's own figures (cuMemGetInfo, or its accounting)
            used, total = server["memory_total"] - server["memory_free"], server["memory_total"]
        figures = [
            ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", s.gpu_util_percent),
            ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", s.sm_clock_mhz),
            ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", used / MIB),
            ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", (total - used) / MIB),
            ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", s.temperature_c),
            ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", s.power_w),
            ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned "
                                       "(tally's accounting of the SM-time its kernels held).",
             None if s.sm_active_percent is None else s.sm_active_percent / 100.0),
        ]
        for name, help_text, value in figures:
            if value is not None:
                family = GaugeMetricFamily(name, help_text, labels=DCGM_LABELS)
                family.add_metric(self._device, value)
                yield family
        if s.hp_sm_active_percent is not None:
            yield GaugeMetricFamily("tally_hp_sm_active_ratio", "The high-priority jobs' part of SM activity "
                                    "(ratio of SM-time, tally's accounting).", value=s.hp_sm_active_percent / 100.0)

    def _event_metrics(self) -> Iterator[Metric]:
        evictions = CounterMetricFamily("tally_evictions", "Jobs evicted, by reason.", labels=["reason"])
        for reason, n in sorted(dict(self._counters.evictions).items()):
            evictions.add_metric([reason], n)
        yield evictions
        yield CounterMetricFamily("tally_device_faults", "Device faults (sticky context errors) the server "
                                  "recovered from.", value=self._counters.device_faults)


def _client_metrics(clients: list[dict], scheduled: dict) -> Iterator[Metric]:
    def family(kind, name, help_text):
        return kind(name, help_text, labels=CLIENT_LABELS)

    used = family(GaugeMetricFamily, "tally_client_memory_used_bytes", "Device memory the job holds now.")
    peak = family(GaugeMetricFamily, "tally_client_memory_peak_bytes", "Most device memory the job held.")
    quota = family(GaugeMetricFamily, "tally_client_memory_quota_bytes",
                   "The job's device memory quota in force (jobs without one are not listed).")
    share = family(GaugeMetricFamily, "tally_client_sm_share_percent",
                   "The job's share of the SMs in % (100: the whole device).")
    granted = family(GaugeMetricFamily, "tally_client_sm_granted", "SMs the job's launches are confined to now.")
    paused = family(GaugeMetricFamily, "tally_client_paused", "1 while the operator has the job paused.")
    kernels = family(CounterMetricFamily, "tally_client_kernels", "Kernels the job launched.")
    graph_units = family(CounterMetricFamily, "tally_client_graph_launches",
                         "The job's CUDA graph replays that ran as one unit (one graph launch).")
    graph_nodes = family(CounterMetricFamily, "tally_client_graph_nodes_replayed",
                         "Kernel nodes of the job's CUDA graph replays that ran node by node.")
    requests = family(CounterMetricFamily, "tally_client_requests", "Driver calls the job sent the server.")
    errors = family(CounterMetricFamily, "tally_client_errors", "Driver calls answered with an error.")
    count = GaugeMetricFamily("tally_clients", "Jobs attached, by priority.", labels=["priority"])
    by_priority = {"high": 0, "best-effort": 0}
    for c in clients:
        labels = [str(c["client_id"]), str(c["pid"]), c["priority"], c["program"]]
        by_priority[c["priority"]] = by_priority.get(c["priority"], 0) + 1
        used.add_metric(labels, c["memory_used"])
        peak.add_metric(labels, c["memory_peak"])
        limit = c.get("memory_quota_bytes", c.get("memory_quota"))
        if limit is not None:
            quota.add_metric(labels, limit)
        share.add_metric(labels, 100.0 if c.get("sm_percent") is None else c["sm_percent"])
        if c.get("sm_granted") is not None:
            granted.add_metric(labels, c["sm_granted"])
        if "state" in c:
            paused.add_metric(labels, 1.0 if c["state"] == "paused" else 0.0)
        own = scheduled.get(c["client_id"])
        if own is not None:
            kernels.add_metric(labels, own["kernels"])
            graph_units.add_metric(labels, own.get("graph_launches", 0))
            graph_nodes.add_metric(labels, own.get("graph_nodes_replayed", 0))
        requests.add_metric(labels, c["requests"])
        errors.add_metric(labels, c["errors"])
    for priority, n in by_priority.items():
        count.add_metric([priority], n)
    yield from (count, used, peak, quota, share, granted, paused, kernels, graph_units, graph_nodes, requests,
               errors)


def _scheduler_metrics(scheduler: dict) -> Iterator[Metric]:
    kernels = CounterMetricFamily("tally_kernels", "Kernels started, by how they ran: whole, sliced, "
                                  "or as a preemptible persistent-thread-block (PTB) kernel.", labels=["mode"])
    for mode, key in KERNEL_MODES:
        kernels.add_metric([mode], scheduler.get(key, 0))
    yield kernels
    yield CounterMetricFamily("tally_preemptions", "Best-effort PTB kernels preempted for high-priority work.",
                              value=scheduler.get("preemptions", 0))
    yield CounterMetricFamily("tally_preemptions_by_planes", "Of those, PTB kernels a high-priority job's C++ "
                              "data plane stopped itself before its kernel.",
                              value=scheduler.get("preemptions_by_planes", 0))
    yield CounterMetricFamily("tally_kernels_batched", "Best-effort kernels started while the same job's earlier "
                              "best-effort work was still on the device (the priority policy's batches of short "
                              "whole kernels).", value=scheduler.get("kernels_batched", 0))
    yield CounterMetricFamily("tally_graph_launches", "CUDA graph replays that ran as one unit (one graph "
                              "launch).", value=scheduler.get("graph_launches", 0))
    yield CounterMetricFamily("tally_graph_nodes_replayed", "Kernel nodes of CUDA graph replays that ran node "
                              "by node.", value=scheduler.get("graph_nodes_replayed", 0))
    delay = scheduler.get("hp_queueing_delay_s")
    if delay is not None:
        buckets = [("+Inf" if bound == "+Inf" else repr(float(bound)), n) for bound, n in delay["buckets"]]
        yield HistogramMetricFamily("tally_hp_queueing_delay_seconds",
                                    "How long high-priority kernels waited in the server, from the head of "
                                    "their stream's queue to their launch.",
                                    buckets=buckets, sum_value=delay["sum"])


def _mobility_metrics(mobility: dict | None, clients: list[dict]) -> Iterator[Metric]:
    """Suspensions, resumes and migrations (tally/server/suspend.py, migration.py)."""
    if not mobility:
        return
    for key, name, help_text in (
            ("suspensions", "tally_suspensions", "Jobs suspended (their device memory moved to host memory)."),
            ("resumes", "tally_resumes", "Suspended jobs resumed."),
            ("migrations", "tally_migrations", "Jobs moved to another tally-server."),
            ("migrations_failed", "tally_migrations_failed", "Migrations that did not happen (the job stayed).")):
        yield CounterMetricFamily(name, help_text, value=mobility.get(key, 0))
    for key, name, help_text, scale in (
            ("last_suspend_ms", "tally_last_suspend_seconds", "How long the last suspension took.", 1e-3),
            ("last_resume_ms", "tally_last_resume_seconds", "How long the last resume took.", 1e-3),
            ("last_migration_ms", "tally_last_migration_seconds", "How long the last migration took.", 1e-3),
            ("last_migration_bytes", "tally_last_migration_bytes", "Device bytes the last migration moved.", 1),
            ("saved_host_bytes", "tally_suspended_host_bytes", "Host memory suspended jobs' saved device memory "
             "takes (compressed where that paid).", 1),
            ("saved_spilled_bytes", "tally_suspended_spilled_bytes", "Suspended jobs' bytes that went to "
             "--suspend-spill-dir.", 1),
            ("saved_kept_bytes", "tally_suspend_kept_host_bytes", "Host memory kept for the next suspension "
             "(--suspend-keep-host).", 1)):
        yield GaugeMetricFamily(name, help_text, value=mobility.get(key, 0) * scale)
    suspended = GaugeMetricFamily("tally_client_suspended_bytes", "Device memory of a suspended job held in host "
                                  "memory (0 while it runs).", labels=CLIENT_LABELS)
    for c in clients:
        suspended.add_metric([str(c["client_id"]), str(c["pid"]), c["priority"], c["program"]],
                             c.get("suspended_bytes", 0))
    yield suspended


def _health_metrics(health: dict | None) -> Iterator[Metric]:
    if not health:
        return
    state = GaugeMetricFamily("tally_health_state", "SysProbe's health state of the device: 1 for the "
                              "current state.", labels=["state"])
    for name in HEALTH_STATES:
        state.add_metric([name], 1.0 if health.get("state") == name else 0.0)
    yield state
