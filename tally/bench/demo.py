"""`tally-bench demo`: tally's main job in one command, told as a story.

Compiles two plain CUDA programs with nvcc (a small inference service and a
small training loop, tally/data/examples/), starts a tally-server for them
(the real GPU when there is one, else the CPU emulator) and runs, all under
tally-run: the inference job alone, the training job alone, then both at once
(inference at high priority, training at best effort). It then compares the
inference latency and the training throughput alone and shared, and says what
the server did to keep inference fast. Exits non-zero if a job fails or
computes a wrong result.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tally import paths
from tally.bench.demo_watch import JobWatch, ServerWatch, start_server
from tally.cli import commands

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "examples"
LATENCY = re.compile(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms")


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidate = Path(home) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else shutil.which("nvcc")


def compile_example(nvcc: str, name: str, out_dir: Path) -> Path:
    source = EXAMPLES / f"{name}.cu"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    binary = out_dir / f"{name}-{digest}"
    if not binary.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        subprocess.run([nvcc, "-O2", "-o", str(tmp), str(source)], check=True)
        tmp.rename(binary)
    return binary


def run_demo(backend: str = "auto", requests: int = 400, steps: int = 600) -> int:
    nvcc = find_nvcc()
    if nvcc is None:
        print("tally-bench demo: nvcc not found; install the CUDA toolkit or set CUDA_HOME", file=sys.stderr)
        return 2
    binaries = paths.cache_dir() / "demo"
    print(f"demo: compiling tally/data/examples/*.cu with {nvcc}", flush=True)
    inference = compile_example(nvcc, "inference", binaries)
    training = compile_example(nvcc, "training", binaries)
    with tempfile.TemporaryDirectory(prefix="tally-demo-") as tmp:
        try:
            server = start_server(backend, Path(tmp))
        except RuntimeError as e:
            print(f"tally-bench demo: {e}", file=sys.stderr)
            return 2
        try:
            print(f"demo: {server.banner}", flush=True)
            return _three_runs(server, [str(inference), str(requests)], [str(training), str(steps)])
        finally:
            server.stop()


def _three_runs(server: ServerWatch, inference: list[str], training: list[str]) -> int:
    run = [*commands.tool("tally-run"), "--server", str(server.socket)]
    hp_cmd = [*run, "--priority", "high", "--", *inference]
    be_cmd = [*run, "--priority", "best-effort", "--", *training]

    print(f"\n[1/3] the inference job alone:  tally-run --priority high -- inference {inference[1]}", flush=True)
    hp_alone = JobWatch.run(hp_cmd, server)
    print(f"[2/3] the training job alone:   tally-run --priority best-effort -- training {training[1]}", flush=True)
    be_alone = JobWatch.run(be_cmd, server)
    print("[3/3] both at once: training started first, then inference", flush=True)
    before = server.counters()
    be_shared = JobWatch.start(be_cmd, server)
    be_shared.wait_until_running()
    hp_shared = JobWatch.start(hp_cmd, server)
    snapshot = server.snapshot_when_attached(2, until=hp_shared)
    hp_shared.finish()
    overlap = hp_shared.attached()   # while inference was attached, training shared the device with it
    be_rate_shared = be_shared.kernel_rate(overlap) if overlap else None
    be_shared.finish()
    after = server.counters()

    for job in (hp_alone, be_alone, hp_shared, be_shared):
        if job.returncode != 0:
            print(f"demo: a job FAILED: {' '.join(job.argv)} exited with status {job.returncode}:\n{job.output}")
            return 1
    print("\nWhat each job printed when they shared the device:")
    print(f"  {hp_shared.output.strip()}\n  {be_shared.output.strip()}")
    if snapshot:
        print("tally-server status while both ran:\n" + "\n".join("  " + line for line in snapshot.splitlines()))
    print(_comparison(hp_alone.output, hp_shared.output, be_alone.kernel_rate(), be_rate_shared))
    print(_what_tally_did({k: after.get(k, 0) - before.get(k, 0) for k in after}, server.backend))
    print("\ndemo: both jobs computed correct results under tally")
    return 0


def _comparison(hp_alone: str, hp_shared: str, be_alone: float | None, be_shared: float | None) -> str:
    a, s = LATENCY.search(hp_alone), LATENCY.search(hp_shared)
    lines = ["", "Alone vs. sharing the device:", f"  {'':34}{'alone':>10}{'shared':>10}"]
    if a and s:
        for i, name in enumerate(("p50", "p99")):
            alone, shared = float(a.group(i + 1)), float(s.group(i + 1))
            lines.append(f"  {'inference latency ' + name + ' (ms)':34}{alone:10.2f}{shared:10.2f}"
                         f"   {shared / alone:.2f}x alone")
    if be_alone and be_shared is not None:
        lines.append(f"  {'training throughput (kernels/s)':34}{be_alone:10.0f}{be_shared:10.0f}"
                     f"   {be_shared / be_alone:.0%} of alone")
    return "\n".join(lines)


def _what_tally_did(delta: dict, backend: str) -> str:
    ptb, sliced, preempted = delta.get("kernels_ptb", 0), delta.get("kernels_sliced", 0), delta.get("preemptions", 0)
    parts = ["", "What tally did: inference ran at high priority, so its kernels went to the device at once;"
                 " the training job's kernels ran only while inference left the device idle."]
    if ptb or sliced:
        how = []
        if ptb:
            how.append(f"{ptb} were rewritten so they can stop between thread blocks and resume later")
        if sliced:
            how.append(f"{sliced} were cut into slices of a few thread blocks")
        parts.append(f"Of the training kernels that ran meanwhile, {' and '.join(how)}; "
                     f"they were preempted {preempted} times so that an inference request never waited "
                     f"for a training kernel to finish.")
    if backend == "emulator":
        parts.append("(No GPU here: the device is tally's CPU emulator, whose threads share this machine's "
                     "cores with both jobs, so the shared numbers include CPU contention a GPU would not have.)")
    return "\n".join(parts)
