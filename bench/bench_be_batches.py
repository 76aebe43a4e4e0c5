"""What best-effort batches (tally/scheduler/whole_durations.py, the priority
policy's `_extend_batch`) save a job of short kernels, through the cuda backend:
a cuda-backend tally-server runs under tally-run against an emulator server
(tests/nested_cuda_server.py), so its launches, end events and completion
callbacks are the real backend code's, on tally's own driver.

tally/bench/jobs/launch_rate.cu launches an empty kernel back to back at best
effort and times the launches until its synchronization returns (`drain_ns` per
launch). Two nested servers in the same run, alternating, three jobs each:
- one at a time: `--turnaround-threshold-ms 1e-6`, which no kernel fits (the C++
  plane then waits for each kernel's drain itself);
- batches: `--turnaround-threshold-ms 5`. The emulator's empty kernel takes tens of
  microseconds of "device" time, over the default 31.6 us; on a GPU an empty
  kernel takes a few, so the default budget batches it there.
A high-priority job's launches on the batching server are the reference: no
completion round trip per kernel.

Reported: medians of microseconds per launch, and one-at-a-time / batches.
Run: python -m pytest bench/bench_be_batches.py -q
"""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from e2e_helpers import emulator_server_process, job_command, job_env  # noqa: E402
from test_cuda_backend_nested import NestedCudaServer  # noqa: E402

from tally.bench.process_jobs import build_cuda_job  # noqa: E402

ROUNDS, BATCH, REPEATS = "10", "500", 3


def launch_us(server: NestedCudaServer, program: Path, priority: str) -> float:
    command = job_command(server.socket, str(program), "--mode", "launches", "--rounds", ROUNDS,
                          "--batch", BATCH, priority=priority)
    job = subprocess.run(command, env=job_env(), capture_output=True, text=True, timeout=900)
    assert job.returncode == 0, job.stdout + job.stderr
    return float(re.search(r"drain_ns=([\d.]+)", job.stdout).group(1)) / 1e3


def test_short_best_effort_kernels_in_batches_against_one_at_a_time(figures):
    program = build_cuda_job("launch_rate.cu")
    servers = {}
    unders = []
    try:
        for label, budget_ms in (("one at a time", "1e-6"), ("batches", "5")):
            under = emulator_server_process()
            unders.append(under)
            servers[label] = NestedCudaServer(under, options=(f"turnaround-ms={budget_ms}",))
        times: dict[str, list[float]] = {label: [] for label in servers}
        for _ in range(REPEATS):
            for label, server in servers.items():
                times[label].append(launch_us(server, program, "best-effort"))
        hp = [launch_us(servers["batches"], program, "high") for _ in range(REPEATS)]
        counters = {label: s.status()["server"]["scheduler"] for label, s in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
        for under in unders:
            under.stop()
    medians = {label: statistics.median(values) for label, values in times.items()}
    section = f"best-effort batches (nested cuda backend, medians of {REPEATS} jobs x {ROUNDS}x{BATCH} launches)"
    for label, values in times.items():
        figures.add(section, f"best effort, {label}: {medians[label]:.1f} us per launch "
                             f"(runs: {', '.join(f'{v:.1f}' for v in values)}); "
                             f"kernels_batched {counters[label]['kernels_batched']}")
    figures.add(section, f"high priority, same server: {statistics.median(hp):.1f} us per launch")
    ratio = medians["one at a time"] / medians["batches"]
    figures.add(section, f"one at a time / batches: {ratio:.2f}x")
    assert counters["one at a time"]["kernels_batched"] == 0
    assert counters["batches"]["kernels_batched"] > 0
