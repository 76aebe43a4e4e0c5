"""Does each job compute the right thing, natively and under tally? The kit's job
programs (tally/bench/process_jobs.py), each alone, each against a tally-server of
its own in a few configurations (the default, graphs replayed node by node, the
Python data plane) and, on a GPU, natively, all at once. Every program checks its
own outputs (against the CPU's), so a cell says right, WRONG or failed.

The first GPU run found the GPT-2 CUDA-graph job's outputs wrong under tally with no
error, and nothing to tell whether they were right natively, or whether graphs or
the data plane were at fault: this matrix tells those apart in one step.

    python -m tally.bench.gpu_check.job_matrix --backend cuda --out DIR
    python -m tally.bench.gpu_check.job_matrix --backend emulator --out DIR   # the rehearsal's jobs
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tally import paths
from tally.bench.process_group import JobFailed, Managed, ProcessGroup, wait_for
from tally.bench.process_jobs import BEST_EFFORT, HIGH, find_program
from tally.cli import commands

NATIVE, TALLY, GRAPH_NODES, PYTHON_PLANE = "native", "tally", "graph-nodes", "python-plane"
# server flags of each variant (None: no tally at all)
VARIANTS: dict[str, tuple[str, ...] | None] = {
    NATIVE: None, TALLY: (), GRAPH_NODES: ("--graph-replay", "nodes"), PYTHON_PLANE: ("--data-plane", "python")}
RIGHT, WRONG, FAILED, NOT_RUN = "right", "WRONG", "failed", "not run"
SERVER_START_S = 60.0
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Job:
    label: str
    program: str                  # a name in tally.bench.process_jobs.PROGRAMS
    workload: str
    role: str
    args: tuple[str, ...]
    variants: tuple[str, ...]


# GPT-2 at 4 layers: the same graph-replay path, a CPU reference in a second.
GPU_JOBS = (
    Job("gpt2-graphs", "gpt2-graphs", "torch", HIGH, ("--layers", "4"), (NATIVE, TALLY, GRAPH_NODES, PYTHON_PLANE)),
    Job("gpt2-eager", "gpt2-graphs", "torch", HIGH, ("--layers", "4", "--eager"), (NATIVE, TALLY)),
    Job("bert-base", "bert-base", "torch", HIGH, (), (NATIVE, TALLY)),
    Job("resnet50-train", "resnet50-train", "torch", BEST_EFFORT, ("--max-steps", "4"), (NATIVE, TALLY)),
    Job("dense-inference", "dense-inference", "cuda", HIGH, (), (NATIVE, TALLY)),
)
# The emulator runs no PyTorch: the CUDA C++ jobs, under tally only (nothing runs natively).
CPU_JOBS = (
    Job("dense-inference", "dense-inference", "cuda", HIGH, (), (NATIVE, TALLY, GRAPH_NODES, PYTHON_PLANE)),
    Job("long-kernel-training", "long-kernel-training", "cuda", BEST_EFFORT, ("--max-steps", "3"),
        (TALLY, PYTHON_PLANE)),
)


@dataclass
class Cell:
    job: str
    variant: str
    result: str = NOT_RUN
    check: str = ""
    exit: int | None = None
    seconds: float = 0.0
    tail: str = ""


@dataclass
class _Running:
    cell: Cell
    job: Managed
    server: Managed | None
    folder: Path
    began: float


def _job_argv(job: Job, folder: Path) -> list[str]:
    argv = [*find_program(job.program, job.role, job.workload).command(), "--out", str(folder / "report.json")]
    if job.role == HIGH:
        arrivals = folder / "arrivals.txt"
        arrivals.write_text("".join(f"{0.02 * i:.3f}\n" for i in range(10)))
        return [*argv, "--arrivals", str(arrivals), "--duration", "0.2", "--drain", "60", *job.args]
    return [*argv, "--stop", str(folder / "stop-never"), *job.args]


def _start(group: ProcessGroup, sockets: Path, job: Job, variant: str, backend: str) -> _Running | Cell:
    cell = Cell(job.label, variant)
    if VARIANTS[variant] is None and backend != "cuda":
        cell.check = "no GPU: nothing runs natively"
        return cell
    name = f"{job.label}-{variant}"
    folder = group.directory / name
    folder.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        argv = _job_argv(job, folder)
        if VARIANTS[variant] is not None:
            socket = sockets / f"{len(group.processes)}.sock"
            server = group.start(f"tally-server ({name})", [*commands.tool("tally-server"), "--backend", backend,
                                                            "--socket", str(socket), *VARIANTS[variant]],
                                 f"{name}/server.log")
            wait_for(socket.exists, SERVER_START_S, server, "listening on its socket")
            priority = "high" if job.role == HIGH else "best-effort"
            argv = [*commands.tool("tally-run"), "--server", str(socket), "--priority", priority, "--", *argv]
    except JobFailed as e:      # a server that cannot start: its cell says so
        cell.result, cell.check = FAILED, f"tally-server did not start: {str(e).splitlines()[0]}"
        return cell
    except Exception as e:      # a job that cannot be built
        cell.result, cell.check = FAILED, str(e)
        return cell
    return _Running(cell, group.start(f"{job.label} ({variant})", argv, f"{name}/job.log"), server, folder,
                    time.monotonic())


def _finish(run: _Running, deadline: float) -> Cell:
    cell = run.cell
    try:
        cell.exit = run.job.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        run.job.stop(STOP_GRACE_S)
        cell.result, cell.check = FAILED, "did not finish in time"
    cell.seconds = round(time.monotonic() - run.began, 1)
    if run.server is not None:
        run.server.stop(STOP_GRACE_S)
    log = (run.folder / "job.log").read_text(errors="replace").splitlines()
    cell.tail = " / ".join(line.strip() for line in log if line.strip())[-600:]
    if cell.result == FAILED:
        return cell
    try:
        report = json.loads((run.folder / "report.json").read_text())
    except (OSError, ValueError):
        cell.result, cell.check = FAILED, f"exit {cell.exit}, no report"
        return cell
    cell.check = str(report.get("check", ""))
    cell.result = RIGHT if report.get("ok") and cell.exit == 0 else WRONG if report.get("ok") is False else FAILED
    return cell


def run_matrix(jobs: tuple[Job, ...], backend: str, out: Path, timeout_s: float) -> list[Cell]:
    """Every (job, variant) at once; each cell's files in out/<job>-<variant>/. Every
    server and job is stopped on the way out, whatever happens (ProcessGroup)."""
    # unix socket paths are limited to 107 bytes: the sockets in a short folder of their own
    sockets = Path(tempfile.mkdtemp(prefix="jobs-", dir=paths.made_runtime_dir()))
    try:
        with ProcessGroup(out) as group:
            started = [_start(group, sockets, job, variant, backend) for job in jobs for variant in job.variants]
            deadline = time.monotonic() + timeout_s
            return [_finish(s, deadline) if isinstance(s, _Running) else s for s in started]
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def format_cells(cells: list[Cell]) -> str:
    lines = [f"{'job':<22} {'variant':<13} {'result':<8} check"]
    for c in cells:
        lines.append(f"{c.job:<22} {c.variant:<13} {c.result:<8} {c.check}"
                     + (f"  [{c.tail[-200:]}]" if c.result == FAILED and c.tail else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="job_matrix", description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("cuda", "emulator"), default="cuda")
    p.add_argument("--out", type=Path, required=True, help="a folder: each cell's logs, and matrix.json")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds for every job together")
    args = p.parse_args(argv)
    jobs = GPU_JOBS if args.backend == "cuda" else CPU_JOBS
    cells = run_matrix(jobs, args.backend, args.out, args.timeout)
    (args.out / "matrix.json").write_text(json.dumps([asdict(c) for c in cells], indent=1) + "\n")
    print(format_cells(cells), flush=True)
    return 0 if all(c.result in (RIGHT, NOT_RUN) for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
