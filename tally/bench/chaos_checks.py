"""What a `tally-bench chaos` campaign must show, checked on its report, and the
table it prints.

The server's resident memory is "flat" when the median of the last quarter of
the rounds is within RSS_TOLERANCE of the first quarter's. The first quarter is
the reference (not the start) because the first jobs fill caches that then stay
(the emulator's lowered kernels, Python's allocator arenas); a leak of what one
job held (its shared segment alone commits ~34 MiB) shows after a single round,
and a per-job leak of ~160 KiB or more shows over 100 rounds (50 rounds apart
times 160 KiB = 8 MiB). The server's own memory is bounded (segments unmapped at
a job's release, glibc's arenas capped and trimmed: tally/server/c_allocator.py);
what is left between quarters is 0.9-2.4 MiB, Python's garbage not collected yet
(bench/results/chaos-2026-11-28.md). The C allocator's bytes in use and held are
shown next to RSS, so a growth says whether memory leaked or was only kept.
"""
from __future__ import annotations

import signal
import statistics

MIB = 1 << 20
RSS_TOLERANCE_BYTES = 8 * MIB
RSS_TOLERANCE_FRACTION = 0.05
# Fewer rounds than this say nothing about a trend (the first rounds still warm
# caches): the RSS check is reported as not judged rather than passed or failed.
RSS_MIN_ROUNDS = 20
EXPECTED_EXIT = {"SIGKILL": -signal.SIGKILL, "SIGTERM": -signal.SIGTERM, "SIGINT": -signal.SIGINT, "evict": 75}


def _check(name: str, passed: bool, detail: str) -> dict:
    """passed: True, False, or None for a check the campaign was too short to judge."""
    return {"name": name, "passed": bool(passed), "detail": detail}


def failed(checks: list[dict]) -> list[dict]:
    return [c for c in checks if c["passed"] is False]


def verdict(check: dict) -> str:
    return {True: "PASS", False: "FAIL", None: "----"}[check["passed"]]


def rss_quarters(rounds: list[dict], key: str = "server_rss_bytes") -> tuple[int, int]:
    """Median server RSS (or another per-round figure) of the first and of the last
    quarter of the rounds (at least one round each)."""
    values = [r.get(key, 0) for r in rounds]
    quarter = max(1, len(values) // 4)
    return int(statistics.median(values[:quarter])), int(statistics.median(values[-quarter:]))


def rss_tolerance(first_bytes: int) -> int:
    return max(RSS_TOLERANCE_BYTES, int(first_bytes * RSS_TOLERANCE_FRACTION))


def check_campaign(report: dict) -> list[dict]:
    rounds, service, final = report["rounds"], report["service"], report["final"]
    checks = []
    wrong, iterations = service.get("wrong"), int(service.get("iterations", 0))
    wrong = None if wrong is None else int(wrong)
    stopped = [r["index"] for r in rounds if not r["service_running"]]
    checks.append(_check("high-priority results", service["exit_status"] == 0 and wrong == 0 and iterations > 0
                         and not stopped,
                         f"{iterations} iterations checked, {wrong} wrong elements, exit {service['exit_status']}"
                         + (f"; not running after round(s) {stopped}" if stopped else "")))
    leaks = [(r["index"], r["leaked_bytes"]) for r in rounds if r["leaked_bytes"]]
    checks.append(_check("device memory back to baseline", not leaks and final["in_use_bytes"] == 0,
                         f"after every round: {'yes' if not leaks else f'no, {leaks[:5]}'}; at the end "
                         f"{final['in_use_bytes']} bytes in use"))
    left = [(r["index"], r["shm_left"]) for r in rounds if r["shm_left"]]
    lingered = [(r["index"], r["shm_lingered"]) for r in rounds if r.get("shm_lingered")]
    checks.append(_check("no /dev/shm object left", not left and not final["shm_left"],
                         f"after every round: {'none' if not left else left[:5]}; at the end "
                         f"{final['shm_left'] or 'none'}"
                         + (f"; gone within seconds of the release: {lingered[:5]}" if lingered else "")))
    first, last = rss_quarters(rounds)
    tolerance = rss_tolerance(first)
    rss = _check("server RSS flat", last - first <= tolerance,
                 f"median first quarter {first / MIB:.1f} MiB, last quarter {last / MIB:.1f} MiB "
                 f"({(last - first) / MIB:+.1f} MiB; tolerance {tolerance / MIB:.1f} MiB)" + _allocator(rounds))
    if len(rounds) < RSS_MIN_ROUNDS:
        rss.update(passed=None, detail=rss["detail"] + f"; not judged under {RSS_MIN_ROUNDS} rounds")
    checks.append(rss)
    off = [(r["index"], r["action"], r["exit_status"]) for r in rounds
           if r["exit_status"] != EXPECTED_EXIT[r["action"]] or r["note"]]
    checks.append(_check("every strike ended its job", not off,
                         "each job exited with its signal (or 75 when evicted)" if not off else f"not so: {off[:5]}"))
    errors = report["server_log_errors"]
    checks.append(_check("server kept serving", final["server_running"] and not errors,
                         "alive, no crash in its log" if not errors else f"{len(errors)} error line(s): {errors[:3]}"))
    return checks


def _allocator(rounds: list[dict]) -> str:
    """The C allocator's bytes in use and held, first vs last quarter: RSS growing
    with them flat is memory the allocator keeps, not a leak (host_memory.py)."""
    first, last = rss_quarters(rounds, "server_malloc_in_use_bytes")
    if not first:               # a server without the record (not glibc, or an older tally)
        return ""
    held_first, held_last = rss_quarters(rounds, "server_malloc_system_bytes")
    return (f"; malloc in use {first / MIB:.1f} -> {last / MIB:.1f} MiB, "
            f"held {held_first / MIB:.1f} -> {held_last / MIB:.1f} MiB")


def format_table(report: dict) -> str:
    """Rounds by action and the phase they struck in, release times, then the checks."""
    rounds = report["rounds"]
    phases = sorted({r["struck_in"] or "-" for r in rounds}, key=_phase_order)
    actions = report["actions"]
    width = max(8, *(len(p) for p in phases))
    lines = [f"{'':>8} " + " ".join(f"{p:>{width}}" for p in phases) + f" {'release p50/max':>16}"]
    for action in actions:
        mine = [r for r in rounds if r["action"] == action]
        counts = [sum(1 for r in mine if (r["struck_in"] or "-") == p) for p in phases]
        releases = sorted(r["release_s"] for r in mine)
        release = f"{statistics.median(releases):.2f}/{releases[-1]:.2f} s" if releases else "-"
        lines.append(f"{action:>8} " + " ".join(f"{c:>{width}}" for c in counts) + f" {release:>16}")
    lines.append("")
    for c in report["checks"]:
        lines.append(f"{verdict(c)}  {c['name']}: {c['detail']}")
    return "\n".join(lines)


def _phase_order(phase: str) -> int:
    order = ("alloc", "copy", "kernel", "graph")
    return order.index(phase) if phase in order else len(order)
