"""`tally-bench graphs`: what a CUDA graph replay costs tally's server as one unit
and node by node, and what that does to an LLM decode step next to training.

    tally-bench graphs [--nodes 240] [--runs 3] [--batches 1,16,64] [--json FILE]

1. Server cost per replay. tally/bench/jobs/graph_replay.cu captures a graph of
   `nodes` empty kernels (a fork/join across two streams) and times back-to-back
   replays to their synchronization, under tally-run against three null-backend
   servers started side by side, `--graph-replay units` (replays after the first
   launched by the C++ data plane), the same with `--data-plane python` (each
   replay through the server's Python) and `--graph-replay nodes`, the runs
   alternating. Nothing runs on the null backend, so a replay's time is the
   server's cost for it (the job's own launch call is reported too). Goal (issue
   29): as one unit at most 2 us + 0.05 us per node, at least 10x less than node
   by node.
2. The decode model (tally/bench/graph_decode.py) on the sim, its per-call host
   costs taken from part 1: p50/p99 of a decode step alone and next to training,
   graph replays as units and node by node.

Report medians and ratios: the machine is shared and noisy.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tally.bench.graph_decode import NATIVE_LAUNCH_CPU_US, HostCosts, decode_model
from tally.bench.process_group import ProcessGroup, wait_for
from tally.bench.process_jobs import build_cuda_job, printed_figures
from tally.cli import commands

# mode -> the server's flags
MODES = {"units": ("--graph-replay", "units"), "units-python-plane": ("--graph-replay", "units", "--data-plane", "python"),
         "nodes": ("--graph-replay", "nodes")}
JOB_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class GraphBenchConfig:
    nodes: int = 240
    runs: int = 3              # job runs per mode, alternating
    replays: int = 200         # replays per timed round (as one unit)
    node_replays: int = 20     # ... node by node (each costs ~100x more)
    rounds: int = 15
    batches: tuple[int, ...] = (1, 16, 64)
    steps: int = 300           # decode steps per sim run
    sim: bool = True

    def validate(self) -> None:
        for name in ("nodes", "runs", "replays", "node_replays", "rounds", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.nodes < 2:
            raise ValueError("--nodes must be at least 2 (the graph forks onto a second stream)")
        if not self.batches or min(self.batches) < 1:
            raise ValueError(f"--batches must be positive batch sizes, got {self.batches}")


def server_cost(config: GraphBenchConfig, directory: Path) -> dict:
    program = build_cuda_job("graph_replay.cu")
    env = {k: v for k, v in os.environ.items() if k != "TALLY_DATA_PLANE"}
    samples: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with ProcessGroup(directory) as group:
        sockets = {}
        for mode in MODES:
            sockets[mode] = directory / f"server-{mode}.sock"
            server = group.start(f"tally-server {' '.join(MODES[mode])}",
                                 [*commands.tool("tally-server"), "--backend", "null", *MODES[mode],
                                  "--socket", str(sockets[mode])], f"server-{mode}.log")
            wait_for(sockets[mode].exists, 60.0, server, "listening on its socket")
        for run in range(config.runs):
            for mode in MODES:
                replays = config.node_replays if mode == "nodes" else config.replays
                job = group.start(f"graph_replay ({mode}, run {run + 1})",
                                  [*commands.tool("tally-run"), "--server", str(sockets[mode]), "--priority", "high",
                                   "--", str(program), "--nodes", str(config.nodes), "--replays", str(replays),
                                   "--rounds", str(config.rounds)], f"job-{mode}-{run}.log", env=env)
                status = job.wait(JOB_TIMEOUT_S)
                if status != 0:
                    raise job.failure(f"exited with status {status}")
                samples[mode].append(printed_figures(job.output()))
    medians = {mode: statistics.median(s["us_per_replay"] for s in samples[mode]) for mode in MODES}
    client = {mode: statistics.median(s["client_us_per_replay"] for s in samples[mode]) for mode in MODES}
    nodes = int(samples["units"][0]["nodes"])
    goal_us = 2.0 + 0.05 * nodes
    return {
        "nodes": nodes,
        "units_us_per_replay": medians["units"],
        "units_python_plane_us_per_replay": medians["units-python-plane"],
        "nodes_us_per_replay": medians["nodes"],
        "nodes_us_per_kernel": medians["nodes"] / nodes,
        "ratio": medians["nodes"] / medians["units"],
        "client_us_per_replay": client,
        "runs_us_per_replay": {mode: [s["us_per_replay"] for s in samples[mode]] for mode in MODES},
        "goal_us_per_replay": goal_us,
        "targets": {"units_us_per_replay": {"target": f"<= {goal_us:g}", "met": medians["units"] <= goal_us},
                    "ratio": {"target": ">= 10", "met": medians["nodes"] / medians["units"] >= 10}},
    }


def run_graph_bench(config: GraphBenchConfig) -> dict:
    config.validate()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="tally-bench-graphs-") as tmp:
        cost = server_cost(config, Path(tmp))
    report = {"server_cost": cost, "config": asdict(config),
              "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()}}
    if config.sim:
        costs = HostCosts(per_launch_us=cost["nodes_us_per_kernel"], per_replay_us=cost["units_us_per_replay"])
        report["decode_model"] = {"host_costs_us": {"per_launch": costs.per_launch_us + NATIVE_LAUNCH_CPU_US,
                                                    "per_replay": costs.per_replay_us + NATIVE_LAUNCH_CPU_US},
                                  "rows": decode_model(config.batches, costs, config.steps)}
    report["wall_s"] = round(time.time() - started, 1)
    return report


def summary(report: dict) -> str:
    c = report["server_cost"]
    lines = [f"server cost per replay of a {c['nodes']}-kernel graph (null backend, medians of "
             f"{len(c['runs_us_per_replay']['units'])} runs): as one unit {c['units_us_per_replay']:.1f} us "
             f"(goal <= {c['goal_us_per_replay']:.1f}: {'met' if c['targets']['units_us_per_replay']['met'] else 'NOT met'}; "
             f"through the server's Python {c['units_python_plane_us_per_replay']:.1f} us), "
             f"node by node {c['nodes_us_per_replay']:.0f} us ({c['nodes_us_per_kernel']:.2f} us a kernel): "
             f"{c['ratio']:.0f}x (goal >= 10x: {'met' if c['targets']['ratio']['met'] else 'NOT met'})"]
    model = report.get("decode_model")
    if model is not None:
        h = model["host_costs_us"]
        lines.append(f"decode model (sim H100; host per kernel launch {h['per_launch']:.1f} us, per graph replay "
                     f"{h['per_replay']:.1f} us):")
        lines.append("  batch kernels  step alone units/nodes ms   p99 alone units/nodes ms   "
                     "p99 shared units/nodes ms   training it/s units/nodes")
        for r in model["rows"]:
            lines.append(f"  {r['batch']:5d} {r['kernels']:7d}  {r['step_alone_ms']['units']:8.2f} /"
                         f"{r['step_alone_ms']['nodes']:7.2f}        {r['units_alone']['p99_ms']:8.2f} /"
                         f"{r['nodes_alone']['p99_ms']:7.2f}       {r['units_shared']['p99_ms']:8.2f} /"
                         f"{r['nodes_shared']['p99_ms']:7.2f}      {r['units_shared']['training_iterations_per_s']:6.2f} /"
                         f"{r['nodes_shared']['training_iterations_per_s']:6.2f}")
    return "\n".join(lines)
