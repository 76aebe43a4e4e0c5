"""The table `tally-server status` prints (and tally-bench demo shows): the server,
its device and limits, SysProbe's health and the last transitions, device faults,
evictions, and one row per job. `status --json` prints the record itself."""
from __future__ import annotations

import time

from tally import protocol
from tally.server.status import ServerStatus
from tally.units import format_bytes


def format_status(s: ServerStatus) -> str:
    be_quota = format_bytes(s.be_memory_quota_bytes) if s.be_memory_quota_bytes is not None else "none"
    lines = [
        f"server   pid {s.pid}  socket {s.socket}  backend {s.backend}  policy {s.policy}  "
        f"{s.data_plane} data plane",
        f"device   {s.device}: {s.device_name}  compute capability {s.compute_capability}  "
        f"CUDA {s.driver_version // 1000}.{s.driver_version % 1000 // 10}  "
        f"memory {_gib(s.memory_total - s.memory_free)} "
        f"used of {_gib(s.memory_total)}  uptime {s.uptime_s:.0f} s",
        f"limits   high-priority jobs at most {s.max_hp_jobs}  memory reserved for them "
        f"{format_bytes(s.hp_memory_reserve_bytes)}  best-effort quota {be_quota}",
        f"clients  {len(s.clients)}",
    ]
    levers = _levers_line(s)
    if levers:
        lines.insert(2, levers)
    lines[-1:-1] = _health_lines(s)
    if s.last_device_fault:
        fault = s.last_device_fault
        cause = ", ".join(f"client {c}" for c in fault["caused_by"]) or "not known"
        lines.insert(-1, f"faults   {s.device_faults} device faults; last: {fault['error']}, caused by {cause}, "
                         f"{len(fault['jobs_failed'])} jobs failed, context {fault['state']}")
    if s.clients:
        lines.append(f"  {'id':>4} {'pid':>8} {'priority':<12} {'state':<9} {'memory':>10} {'quota':>10} "
                     f"{'SMs':>9} {'requests':>10} {'errors':>7}  program")
        for c in s.clients:
            quota = _gib(c.memory_quota_bytes) if c.memory_quota_bytes is not None else "-"
            lines.append(f"  {c.client_id:>4} {c.pid:>8} {protocol.priority_name(c.priority):<12} {c.state:<9} "
                         f"{_gib(c.memory_used):>10} {quota:>10} {_sms(c, s.sm_count):>9} {c.requests:>10} "
                         f"{c.errors:>7}  {c.program}")
            if c.evicted is not None:
                lines.append(f"       evicted: {c.evicted}")
    return "\n".join(lines)


def _health_lines(s: ServerStatus) -> list[str]:
    """SysProbe's state, why, its back-off and last transition; evictions by cause."""
    lines = []
    h = s.health
    if h is None:
        lines.append("health   off (--no-health)")
    else:
        since = time.strftime("%H:%M:%S", time.localtime(h["since_s"]))
        line = f"health   {h['state']} since {since}: {h['reason']}"
        if h.get("backoff_until_s"):
            line += f"; best-effort jobs refused until {time.strftime('%H:%M:%S', time.localtime(h['backoff_until_s']))}"
        lines.append(line)
        for tr in h.get("transitions", [])[-3:]:
            at = time.strftime("%H:%M:%S", time.localtime(tr["at"]))
            lines.append(f"         {at} {tr['from']} -> {tr['to']}: {tr['cause']}")
    if s.evictions:
        lines.append("evicted  " + ", ".join(f"{n} by {cause}" for cause, n in sorted(s.evictions.items())))
    return lines


def _sms(c, sm_count: int) -> str:
    """SMs granted now / the device's (its own share in percent, if it has one)."""
    if c.sm_granted is None:
        return "-"
    share = f" {c.sm_percent:g}%" if c.sm_percent is not None else ""
    return f"{c.sm_granted}/{sm_count}{share}"


def _levers_line(s: ServerStatus) -> str:
    parts = []
    if s.be_sm_percent is not None:
        parts.append(f"best-effort SM share {s.be_sm_percent:g}%")
    dynamic = s.levers.get("dynamic_sm")
    if s.dynamic_sm and dynamic:
        parts.append(f"dynamic SM: best-effort jobs get {dynamic['best_effort_percent']:g}% "
                     f"(floor {dynamic['floor_percent']:g}%)")
    control = s.levers.get("compute_control")
    if s.be_util_target is not None and control:
        parts.append(f"compute control: target {control['target']:g}, holding best-effort work "
                     f"{control['hold']:.0%} of the time")
    return "levers   " + "; ".join(parts) if parts else ""


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"
