"""What `tally-server top` draws from one status record (the JSON that
`tally-server status --json` prints): the server and device, health and its last
transitions, the scheduler's totals, and one row per job. A pure function of the
record, so the live loop (tally/cli/top_main.py) only fetches and redraws.

Keys other parts of the server add (health, SM shares, the quota in force, a
job's state) are shown when the record has them.
"""
from __future__ import annotations

import time

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tally.units import format_bytes

HEALTH_STYLE = {"healthy": "green", "init": "cyan", "unhealthy": "yellow", "overlimit": "bold red",
                "disabled": "bold red"}
TRANSITIONS_SHOWN = 5


def render(status: dict | None, socket_path: str, error: str | None = None, lost_at: float | None = None):
    """The screen: the last record (None: none yet) and, when the server stopped
    answering, why and since when."""
    parts = []
    if error is not None:
        since = "" if lost_at is None else time.strftime(" since %H:%M:%S", time.localtime(lost_at))
        parts.append(Text(f"no tally-server answers on {socket_path}{since} ({error}); "
                          "retrying, q quits", style="bold red"))
    if status is not None:
        parts += [*_server_lines(status["server"], stale=error is not None), _clients_table(status)]
        parts += _transitions(status["server"].get("health"))
    parts.append(Text("q quits", style="dim"))
    return Group(*parts)


def _server_lines(s: dict, stale: bool) -> list:
    used = s["memory_total"] - s["memory_free"]
    head = Text(f"tally-server pid {s['pid']}  backend {s['backend']}  policy {s['policy']}  "
                f"uptime {s['uptime_s']:.0f} s" + ("  (last known state)" if stale else ""), style="bold")
    device = Text(f"device {s['device']}: {s['device_name']}  memory {format_bytes(used)} used of "
                  f"{format_bytes(s['memory_total'])}")
    lines = [head, device]
    health = s.get("health")
    if health:
        line = Text("health ")
        line.append(health.get("state", "?"), style=HEALTH_STYLE.get(health.get("state"), ""))
        if health.get("reason"):
            line.append(f"  {health['reason']}")
        lines.append(line)
    sched = s.get("scheduler", {})
    line = (f"kernels whole {sched.get('kernels_whole', 0)}  sliced {sched.get('kernels_sliced', 0)}  "
            f"ptb {sched.get('kernels_ptb', 0)}  batched {sched.get('kernels_batched', 0)}  "
            f"preemptions {sched.get('preemptions', 0)}")
    delay = sched.get("hp_queueing_delay_s")
    if delay and delay["count"]:
        line += f"  high-priority queueing: 99% of {delay['count']} kernels <= {_quantile_bound(delay, 0.99)}"
    lines.append(Text(line))
    if s.get("device_faults"):
        lines.append(Text(f"device faults {s['device_faults']}", style="red"))
    return lines


def _quantile_bound(delay: dict, q: float) -> str:
    """The smallest bucket bound that q of the observations are under."""
    need = q * delay["count"]
    for bound, cumulative in delay["buckets"]:
        if cumulative >= need:
            return bound if bound == "+Inf" else _seconds(bound)
    return "+Inf"


def _seconds(s: float) -> str:
    return f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _clients_table(status: dict) -> Table:
    clients = status["clients"]
    scheduled = status["server"].get("scheduler", {}).get("clients", {})
    table = Table(title=f"jobs: {len(clients)} attached", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (("id", "right"), ("pid", "right"), ("priority", "left"), ("state", "left"),
                          ("SM share", "right"), ("memory", "right"), ("quota", "right"),
                          ("kernels", "right"), ("errors", "right"), ("program", "left")):
        table.add_column(name, justify=justify, no_wrap=name != "program")
    for c in clients:
        share = "whole" if c.get("sm_percent") is None else f"{c['sm_percent']:g}%"
        if c.get("sm_granted") is not None:
            share += f" ({c['sm_granted']} SMs)"
        quota = c.get("memory_quota_bytes", c.get("memory_quota"))
        own = scheduled.get(c["client_id"], scheduled.get(str(c["client_id"]), {}))
        state = c.get("evicted") and "evicted" or c.get("state", "running")
        table.add_row(str(c["client_id"]), str(c["pid"]),
                      Text(c["priority"], style="bold" if c["priority"] == "high" else ""), state, share,
                      format_bytes(c["memory_used"]), "-" if quota is None else format_bytes(quota),
                      str(own.get("kernels", "-")), str(c["errors"]), c["program"])
    return table


def _transitions(health: dict | None) -> list:
    shown = (health or {}).get("transitions", [])[-TRANSITIONS_SHOWN:]
    if not shown:
        return []
    lines = [Text("last transitions", style="bold")]
    for tr in reversed(shown):
        at = tr.get("at", tr.get("t"))
        cause = tr.get("reason") or tr.get("cause", "")
        lines.append(Text(f"  {_at(at)}  {tr.get('from', '?')} -> {tr.get('to', '?')}  {cause}"))
    return lines


def _at(at) -> str:
    return f"t={at:.1f}" if isinstance(at, (int, float)) else str(at)
