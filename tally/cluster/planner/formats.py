"""A deployment as people and tools read it: a table, JSON, NVIDIA
mig-parted's configuration file (MIG plans), or the `tally-server` and
`tally-run --sm-percent` commands (SM-share plans)."""
from __future__ import annotations

import json
from itertools import groupby

import yaml

from tally.cluster.planner.deployment import Deployment, GpuPlan
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.gpus import MIG, SM_SHARE

FORMATS = ("table", "json", "mig-parted", "tally-run")


def _ranges(indices: list[int]) -> str:
    spans = []
    for _, run in groupby(enumerate(indices), key=lambda t: t[1] - t[0]):
        run = [i for _, i in run]
        spans.append(f"{run[0]}" if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(spans)


def _groups(deployment: Deployment) -> list[list[GpuPlan]]:
    groups: dict[tuple, list[GpuPlan]] = {}
    for gpu in deployment.gpus:
        groups.setdefault(gpu.signature(), []).append(gpu)
    return list(groups.values())


def summary_lines(deployment: Deployment) -> list[str]:
    s = deployment.summary
    kind = "MIG" if deployment.partitions == MIG else f"{deployment.step_percent}% SM-share"
    lines = [f"{len(deployment.services)} services on {deployment.gpu}, {kind} partitions: "
             f"{len(deployment.gpus)} GPUs ({s.get('algorithm', 'plan')}, {s.get('status', '')}, "
             f"{s.get('seconds', 0):.1f} s)"]
    if s.get("lp_bound") is not None:
        lines.append(f"  LP lower bound {s['lp_bound']:.2f} (so at least {s['lower_bound']} GPUs): gap "
                     f"{100 * s['gap']:.2f}%; configuration-LP bound {s.get('config_lp_bound', 0):.2f}")
    compare = [f"{name} {value}" for name, value in (("whole GPUs", s.get("whole_gpus")),
                                                     ("all smallest", s.get("all_smallest")),
                                                     ("greedy", s.get("greedy"))) if value is not None]
    if compare:
        saving = s.get("saving_vs_whole")
        lines.append("  compared: " + ", ".join(compare)
                     + (f"; {100 * saving:.1f}% fewer GPUs than whole GPUs" if saving is not None else ""))
    return lines


def table(deployment: Deployment) -> str:
    lines = summary_lines(deployment) + ["", f"{'GPUs':<12} {'partitions: service (model, batch, requests/s)'}"]
    for group in _groups(deployment):
        parts = " | ".join(f"{p.profile}: {p.service} ({p.model}, b{p.batch}, {p.throughput:.0f}/s)"
                           for p in group[0].parts)
        label = _ranges([g.index for g in group]) + (f" (x{len(group)})" if len(group) > 1 else "")
        lines.append(f"{label:<12} {parts}")
    lines += ["", f"{'service':<28} {'model':<13} {'required/s':>10} {'capacity/s':>10} {'p99 SLO ms':>10}"]
    for s in deployment.services:
        lines.append(f"{s['name']:<28} {s['model']:<13} {s['throughput']:>10.1f} {s['capacity']:>10.1f} "
                     f"{s['p99_ms']:>10.2f}")
    return "\n".join(lines) + "\n"


def to_json(deployment: Deployment) -> str:
    return json.dumps(deployment.to_dict(), indent=1) + "\n"


def mig_parted(deployment: Deployment, gpus_per_node: int | None = None, name: str = "tally-plan") -> str:
    """mig-parted's config file (`nvidia-mig-parted apply -f FILE -c NAME`).
    With gpus_per_node, one config per node (NAME-node-K) with the node's own
    device indices; otherwise one config whose devices are the plan's GPU
    numbers."""
    if deployment.partitions != MIG:
        raise PlanInputError("mig-parted configurations are for MIG plans; an SM-share plan is deployed with "
                             "--format tally-run")
    configs: dict[str, list] = {}
    for gpu in deployment.gpus:
        node, device = (0, gpu.index) if not gpus_per_node else divmod(gpu.index, gpus_per_node)
        key = name if not gpus_per_node else f"{name}-node-{node}"
        counts: dict[str, int] = {}
        for part in gpu.parts:
            counts[part.profile] = counts.get(part.profile, 0) + 1
        entries = configs.setdefault(key, [])
        match = next((e for e in entries if e["mig-devices"] == counts), None)
        if match:
            match["devices"].append(device)
        else:
            entries.append({"devices": [device], "mig-enabled": True, "mig-devices": counts})
    header = (f"# tally-plan: {len(deployment.gpus)} {deployment.gpu} GPUs. Apply with\n"
              f"#   nvidia-mig-parted apply -f THIS_FILE -c {name}{'-node-K (on node K)' if gpus_per_node else ''}\n")
    return header + yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)


def tally_run(deployment: Deployment, gpus_per_node: int | None = None) -> str:
    """One tally-server per GPU and one `tally-run --sm-percent` per part."""
    if deployment.partitions != SM_SHARE:
        raise PlanInputError("tally-run lines are for SM-share plans; a MIG plan is deployed with --format mig-parted")
    commands = {s["name"]: s.get("command") for s in deployment.services}
    lines = ["#!/bin/sh", f"# tally-plan: {len(deployment.gpus)} {deployment.gpu} GPUs, SM shares. Each job reads",
             "# its batch size from the command; <...> marks a service with no 'command' in the input.", "",
             "mkdir -p /run/tally", ""]
    for gpu in deployment.gpus:
        node, device = (None, gpu.index) if not gpus_per_node else divmod(gpu.index, gpus_per_node)
        where = f"node {node}, " if node is not None else ""
        socket = f"/run/tally/gpu{device}.sock"
        lines.append(f"# GPU {gpu.index} ({where}device {device})")
        # every part is a high-priority job of its own: the server must admit them all
        lines.append(f"tally-server --device {device} --socket {socket} --max-hp-jobs {max(1, len(gpu.parts))} &")
        lines.append(f"until tally-server status --socket {socket} >/dev/null 2>&1; do sleep 0.2; done")
        for part in gpu.parts:
            template = commands.get(part.service)
            command = (template.replace("{batch}", str(part.batch)) if template
                       else f"<command of service {part.service}, batch {part.batch}>")
            percent = part.partition.rstrip("%")
            lines.append(f"tally-run --server {socket} --priority high --sm-percent {percent} -- {command} &")
        lines.append("")
    return "\n".join(lines)


def render(deployment: Deployment, fmt: str, gpus_per_node: int | None = None) -> str:
    if fmt == "table":
        return table(deployment)
    if fmt == "json":
        return to_json(deployment)
    if fmt == "mig-parted":
        return mig_parted(deployment, gpus_per_node)
    if fmt == "tally-run":
        return tally_run(deployment, gpus_per_node)
    raise PlanInputError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
