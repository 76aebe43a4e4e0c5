"""The results file the kit writes (bench/results/gpu-<date>-<device>.md): the
device, driver, date and commands, each step's figures, and how they compare
with Tally's published figures. It is rewritten after every step, so the file
that comes back from a cut device call holds every step that finished."""
from __future__ import annotations

import json
from pathlib import Path

from tally.bench.gpu_check.device import Device
from tally.bench.gpu_check.runner import StepResult

# Tally (Zhao et al., ASPLOS 2025) on an A100: the high-priority job's p99 latency
# 7.2% above running alone on average, system throughput about 1.44.
PUBLISHED_P99_OVERHEAD = 0.072
PUBLISHED_SYSTEM_THROUGHPUT = 1.44
PREEMPTION_GOAL_US = 40.0


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list) and all(isinstance(v, float) for v in value):
        return "[" + ", ".join(f"{v:.3g}" for v in value) + "]"
    return str(value)


def _figure_lines(figures: dict, indent: str = "") -> list[str]:
    lines = []
    for key, value in figures.items():
        if isinstance(value, dict) and value:
            lines.append(f"{indent}- {key}:")
            lines += _figure_lines(value, indent + "  ")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{indent}- {key}:")
            lines += [f"{indent}  - " + ", ".join(f"{k} {_fmt(v)}" for k, v in row.items()) for row in value]
        else:
            lines.append(f"{indent}- {key}: {_fmt(value)}")
    return lines


def comparison(results: list[StepResult], rehearse: bool) -> str:
    """The paragraph that sets this run's figures beside Tally's published ones."""
    by_key = {r.key: r for r in results}
    parts = []
    colocate = by_key.get("colocate")
    runs = colocate.figures if colocate else {}
    priority = [(name, run["policies"]["priority"]) for name, run in runs.items()
                if isinstance(run, dict) and "priority" in run.get("policies", {})]
    for name, p in priority:
        overhead = p["p99_vs_alone"] - 1.0
        parts.append(f"{name}: under the priority policy the high-priority p99 is {overhead * 100:+.1f}% against alone "
                     f"(Tally: {PUBLISHED_P99_OVERHEAD * 100:.1f}%), system throughput {p['system_throughput']:.2f} "
                     f"(Tally: ~{PUBLISHED_SYSTEM_THROUGHPUT:.2f})")
    preemption = by_key.get("preemption")
    if preemption and "delay_p99_us" in preemption.figures:
        d = preemption.figures["delay_p99_us"]
        parts.append(f"the preemption delay's p99 is {d:.0f} us (goal <= {PREEMPTION_GOAL_US:.0f} us; XSched reports "
                     f"32 us, GPreempt < 40 us)")
    if not parts:
        text = "No co-location or preemption figures were measured in this run, so there is nothing to set beside " \
               "Tally's published figures (7.2% p99 overhead, ~1.44 system throughput on an A100)."
    else:
        text = "Against Tally's published figures (an A100; 7.2% average p99 overhead for the high-priority job, " \
               "~1.44 system throughput): " + "; ".join(parts) + "."
    if rehearse:
        text += (" This is a rehearsal on the CPU emulator: the figures prove the kit's plumbing (every step ran, "
                 "wrote its files and was read back) and are NOT comparable with GPU figures; the emulator's "
                 "\"device\" is the host's CPU cores.")
    return text


def markdown(results: list[StepResult], device: Device, date: str, command: str, rehearse: bool, quick: bool,
             deadline_s: float, install: dict | None) -> str:
    title = "GPU kit rehearsal on the CPU emulator" if rehearse else f"GPU kit on {device.name}"
    lines = [f"# {title} ({date})", "",
             f"- device: {device.name} ({device.memory}); driver: {device.driver}",
             f"- host: {device.host}",
             f"- date: {date} (UTC)",
             f"- command: `{command}`" + (" (--quick)" if quick else ""),
             f"- deadline: {deadline_s:.0f} s for the steps", ""]
    if install:
        lines += ["## install", "", f"- {install.get('status', '?')} in {install.get('wall_s', 0):.0f} s: "
                  f"`{install.get('command', '')}`"] + ([f"- {install['note']}"] if install.get("note") else []) + [""]
    lines += ["## steps", "", "| # | step | status | wall s | budget s |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r.index} | {r.key} | {r.status} | {r.wall_s:.1f} | {r.budget_s} |" for r in results]
    lines.append("")
    for r in results:
        lines += [f"## {r.index}. {r.key}: {r.title}", "", f"{r.status}, {r.wall_s:.1f} s of {r.budget_s} s"
                  + (f"; {r.note}" if r.note else ""), ""]
        lines += [f"    $ {c}" for c in r.commands] + [""]
        lines += _figure_lines(r.figures) or ["- no figures"]
        lines.append("")
    lines += ["## against Tally's published figures", "", comparison(results, rehearse), ""]
    return "\n".join(lines)


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.rename(path)


def results_json(results: list[StepResult], device: Device, date: str, command: str, install: dict | None) -> str:
    return json.dumps({"device": device.__dict__, "date": date, "command": command, "install": install,
                       "steps": [r.to_json() for r in results]}, indent=1, sort_keys=True) + "\n"
