"""The job programs `tally-bench colocate --backend cuda|emulator` runs, by name.

Two families (`--workload`):
- `cuda`: plain CUDA C++ programs in tally/bench/jobs/*.cu, compiled with nvcc
  on first use and cached by the hash of their sources. Small default sizes,
  so they run on the CPU emulator; --hp-args/--be-args make them GPU-sized.
- `torch`: PyTorch scripts (tally/bench/jobs/torch_*.py) for a GPU machine:
  BERT-base-shaped, ResNet-50-shaped and GPT-2-sized (CUDA graph replay)
  models with random weights.

Every high-priority program takes `--arrivals FILE --duration S --drain S
--out FILE`; every best-effort program takes `--out FILE --stop FILE --ready
FILE`; both write a JSON report (tally/bench/process_results.py reads them).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tally import paths
from tally.cli import commands
from tally.bench.demo import find_nvcc

JOBS_DIR = Path(__file__).resolve().parent / "jobs"
WORKLOADS = ("cuda", "torch")
HIGH, BEST_EFFORT = "high", "best-effort"


class JobBuildError(RuntimeError):
    """A job program could not be built (nvcc missing or failing)."""


@dataclass(frozen=True)
class JobProgram:
    name: str
    role: str                  # HIGH or BEST_EFFORT
    workload: str              # "cuda" or "torch"
    what: str                  # one line for --help and reports
    source: str = ""           # cuda: the .cu file in JOBS_DIR
    module: str = ""           # torch: the script's module
    model: str = ""            # torch: --model of the script
    args: tuple[str, ...] = ()  # torch: the script's further arguments

    def command(self) -> list[str]:
        """argv that starts the program (without the role's file arguments)."""
        if self.workload == "cuda":
            return [str(build_cuda_job(self.source))]
        return [*commands.python_module(self.module, "-u"), "--model", self.model, *self.args]


_PROGRAMS = (
    JobProgram("dense-inference", HIGH, "cuda", "dense+ReLU layers per request (--layers, --width)",
               source="dense_inference.cu"),
    JobProgram("long-kernel-training", BEST_EFFORT, "cuda",
               "least-squares gradient descent, kernels looping over whole rows/columns (--samples, --features)",
               source="long_kernel_training.cu"),
    JobProgram("preempt-probe", HIGH, "cuda",
               "one 1-block kernel and a synchronization per request (preemption delay: shared minus alone)",
               source="preempt_probe.cu"),
    JobProgram("bert-base", HIGH, "torch", "BERT-base encoder inference (12 x 768, 12 heads, seq 128)",
               module="tally.bench.jobs.torch_serve", model="bert-base"),
    JobProgram("resnet50", HIGH, "torch", "ResNet-50 inference (bottleneck blocks, 224 x 224)",
               module="tally.bench.jobs.torch_serve", model="resnet50"),
    JobProgram("gpt2-graphs", HIGH, "torch", "GPT-2-sized decoder (12 x 768) by CUDA graph replay, next-token logits",
               module="tally.bench.jobs.torch_decode", model="gpt2"),
    JobProgram("bert-train", BEST_EFFORT, "torch", "BERT-base encoder training, AdamW, random data",
               module="tally.bench.jobs.torch_train", model="bert-base"),
    JobProgram("resnet50-train", BEST_EFFORT, "torch", "ResNet-50 training, SGD with momentum, random data",
               module="tally.bench.jobs.torch_train", model="resnet50"),
    JobProgram("bert-train-compiled", BEST_EFFORT, "torch",
               "BERT-base encoder training through torch.compile (Inductor's Triton kernels), AdamW, random data",
               module="tally.bench.jobs.torch_train", model="bert-base", args=("--compile",)),
)
PROGRAMS: dict[str, JobProgram] = {p.name: p for p in _PROGRAMS}
DEFAULT_JOBS = {"cuda": ("dense-inference", "long-kernel-training"), "torch": ("bert-base", "bert-train")}


def find_program(name: str, role: str, workload: str) -> JobProgram:
    """The program called `name`; a clear error when it does not exist or does not fit."""
    program = PROGRAMS.get(name)
    fitting = [p.name for p in _PROGRAMS if p.role == role and p.workload == workload]
    if program is None or program.role != role or program.workload != workload:
        kind = "high-priority" if role == HIGH else "best-effort"
        raise ValueError(f"no {kind} job {name!r} in the {workload!r} workload; choose one of {', '.join(fitting)}")
    return program


def build_cuda_job(source_name: str, nvcc: str | None = None) -> Path:
    """Compile tally/bench/jobs/<source_name> (cached under ~/.cache/tally/colocate-jobs)."""
    source = JOBS_DIR / source_name
    if not source.is_file():
        raise JobBuildError(f"job source {source} is missing; reinstall tally")
    digest = hashlib.sha256()
    for part in (source, *sorted(JOBS_DIR.glob("*.h"))):     # any header it may include
        digest.update(part.read_bytes())
    binary = paths.cache_dir() / "colocate-jobs" / f"{source.stem}-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise JobBuildError("nvcc not found: the cuda workload compiles its jobs; install the CUDA toolkit "
                            "or set CUDA_HOME")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(f"{binary.name}.tmp{os.getpid()}")
    command = [nvcc, "-O2", "-std=c++17", "-o", str(tmp), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JobBuildError(f"compiling {source.name} failed; reproduce with:\n  {' '.join(command)}\n"
                            f"{done.stdout}{done.stderr}")
    tmp.rename(binary)         # atomic: concurrent benchmarks never run half a binary
    return binary


def printed_figures(output: str) -> dict[str, float]:
    """The `key=number` tokens a benchmark job program printed (launch_rate.cu,
    graph_replay.cu); other tokens are ignored."""
    values = {}
    for token in output.split():
        key, sep, value = token.partition("=")
        if sep:
            try:
                values[key] = float(value)
            except ValueError:
                pass
    return values
