"""Steps that run tally-bench: launch cost, co-location with PyTorch jobs,
preemption delay, SM shares and migration. On the GPU they use the cuda
backend; in a rehearsal the emulator (or the null backend for launch cost) and
the CUDA C++ job programs stand in, with small sizes."""
from __future__ import annotations

from pathlib import Path

from tally.bench.gpu_check.step import Mode, Step, read_json
from tally.cli import commands

# The best-effort CUDA job filling an H200 (132 SMs): the residual kernel has a thread
# per sample (1024 blocks of 256), the gradient kernel a block per feature looping over
# every sample, milliseconds long: what a high-priority launch must get past.
GPU_FILLER_ARGS = "--samples 262144 --features 512"
# Budgets as measured on the first GPU run (2026-12-04, bench/results/gpu-2026-12-04-nvidia-h200.md):
# each co-location run costs its duration, the jobs' start and up to a 10 s drain, about
# 12 s for CUDA C++ jobs and more for PyTorch's, so a share costs about 45 s (four runs).
SM_SHARES_GPU, SM_SHARES_QUICK, SM_SHARES_CPU = (25, 100), (25,), (50, 100)


def bench(*args: str) -> list[str]:
    return [*commands.python_module("tally.cli.bench_main"), *args]


def workdir(mode: Mode, name: str) -> list[str]:
    """tally-bench colocate keeps its runs' server and job logs in the step's folder, which
    the kit bundles: the first GPU run's failures had only the jobs' last lines to go on."""
    return ["--workdir", str(mode.out / f"runs-{name}")]


# ---- launch cost ---------------------------------------------------------------------------

def _launch_commands(mode: Mode) -> list[list[str]]:
    out = ["--json", str(mode.out / "launch.json")]
    if mode.rehearse:        # the cuda backend needs a GPU: the null backend measures tally's side alone
        small = ["--rounds", "2", "--batch", "200", "--syncs", "100", "--wakes", "10", "--gap-us", "200"]
        return [bench("launch", "--backend", "null", "--jobs", "2", *small, *out)]
    # The first GPU run's default sizes did not finish in 30 s: its best-effort phase paid a
    # completion round trip per kernel (one unit at a time; bench/results/be-batches-2026-12-04.md).
    # Short whole kernels now go in batches; the best-effort job still launches fewer, so the
    # step returns its figures even if they do not batch on the GPU, with an overrun's dump.
    small = ["--rounds", "8", "--be-rounds", "2", "--syncs", "800", "--wakes", "80"]
    return [bench("launch", "--backend", "cuda", *small, *out)]


LAUNCH_KEYS = ("hp_us_per_launch", "be_us_per_launch", "sync_rtt_us", "wake_us", "aggregate_launches_per_s",
               "native_launches_per_s", "native_ratio")


def _launch_figures(mode: Mode, output: str) -> dict:
    report = read_json(mode.out / "launch.json")
    if report is None:
        return {}
    figures = {k: report[k] for k in LAUNCH_KEYS if k in report}
    figures["targets"] = {k: bool(t["met"]) for k, t in report.get("targets", {}).items()}
    return figures


LAUNCH = Step(
    key="launch", title="launch cost",
    what="launches/s and synchronization round trip through tally against the same program natively",
    budget_s=30, quick_budget_s=30, commands=_launch_commands, figures=_launch_figures)


# ---- co-location ---------------------------------------------------------------------------

def colocate_figures(report: dict) -> dict:
    """The co-location report's headline figures: latency alone and per policy, throughputs."""
    alone = report.get("alone", {})
    figures = {"hp_job": report.get("config", {}).get("hp_model"), "be_job": report.get("config", {}).get("be_model"),
               "alone_p50_ms": alone.get("hp_p50_ms"), "alone_p99_ms": alone.get("hp_p99_ms"), "policies": {}}
    for name, r in report.get("policies", {}).items():
        figures["policies"][name] = {
            "p50_ms": r["hp_p50_ms"], "p99_ms": r["hp_p99_ms"], "p99_vs_alone": r["hp_p99_vs_alone"],
            "be_normalized_throughput": r["be_normalized_throughput"], "system_throughput": r["system_throughput"]}
    return figures


def _colocate_commands(mode: Mode) -> list[list[str]]:
    def run(name: str, *args: str, png: bool = True) -> list[str]:
        return bench("colocate", *args, "--json", str(mode.out / f"{name}.json"), *workdir(mode, name),
                     *(["--png", str(mode.out / f"{name}.png")] if png else []))
    if mode.rehearse:       # PyTorch needs the GPU: the CUDA C++ jobs stand in, on the emulator
        policies = ["--policies", "priority"] if mode.quick else []
        return [run("cuda-jobs", "--backend", "emulator", "--workload", "cuda", "--duration",
                    "1" if mode.quick else "1.5", *policies)]
    torch_jobs = ["--backend", "cuda", "--workload", "torch"]
    if mode.quick:
        return [run("bert-resnet", *torch_jobs, "--hp-job", "bert-base", "--be-job", "resnet50-train",
                    "--policies", "priority", "--duration", "4")]
    # Five runs (calibration, each job alone, two policies); a torch job's start-up (import,
    # model, the CPU's reference) and a drain come on top of each run's duration. The GPT-2
    # graph job's correctness is the jobs step's; its latency next to training, the second
    # command's, when the first leaves time.
    return [run("bert-resnet", *torch_jobs, "--hp-job", "bert-base", "--be-job", "resnet50-train",
                "--policies", "priority,time-slice", "--duration", "3"),
            run("gpt2-resnet", *torch_jobs, "--hp-job", "gpt2-graphs", "--be-job", "resnet50-train",
                "--policies", "priority", "--duration", "3", png=False)]


def _colocate_step_figures(mode: Mode, output: str) -> dict:
    figures = {}
    for path in sorted(mode.out.glob("*.json")):
        report = read_json(path)
        if report is not None and "policies" in report:
            figures[path.stem] = colocate_figures(report)
            if (mode.out / f"{path.stem}.png").is_file():
                figures[path.stem]["png"] = f"{path.stem}.png"
    return figures


COLOCATE_TORCH = Step(
    key="colocate", title="co-location with PyTorch jobs",
    what="BERT-base (then a GPT-2-sized decoder by CUDA graphs, if time is left) at high priority next to "
         "ResNet-50 training, "
         "the priority and time-slice policies and alone: p50/p99, normalized and system throughput, a PNG",
    budget_s=120, quick_budget_s=75, commands=_colocate_commands, figures=_colocate_step_figures)


# ---- preemption delay ----------------------------------------------------------------------

def _preemption_commands(mode: Mode) -> list[list[str]]:
    # Low load: requests rarely queue behind each other, so latency is launch to completion.
    common = ["colocate", "--workload", "cuda", "--hp-job", "preempt-probe", "--be-job", "long-kernel-training",
              "--policies", "priority", "--load", "0.05", "--json", str(mode.out / "preemption.json"),
              *workdir(mode, "preemption")]
    if mode.rehearse:
        return [bench(*common, "--backend", "emulator", "--duration", "1" if mode.quick else "2")]
    return [bench(*common, "--backend", "cuda", "--be-args", GPU_FILLER_ARGS, "--duration", "3")]


def _preemption_figures(mode: Mode, output: str) -> dict:
    report = read_json(mode.out / "preemption.json")
    if report is None or "priority" not in report.get("policies", {}):
        return {}
    alone, shared = report["alone"], report["policies"]["priority"]
    return {"alone_p50_us": alone["hp_p50_ms"] * 1e3, "alone_p99_us": alone["hp_p99_ms"] * 1e3,
            "shared_p50_us": shared["hp_p50_ms"] * 1e3, "shared_p99_us": shared["hp_p99_ms"] * 1e3,
            "delay_p50_us": (shared["hp_p50_ms"] - alone["hp_p50_ms"]) * 1e3,
            "delay_p99_us": (shared["hp_p99_ms"] - alone["hp_p99_ms"]) * 1e3,
            "goal_p99_us": 40.0, "requests": report.get("hp_arrivals"),
            "be_normalized_throughput": shared["be_normalized_throughput"],
            # how many the high-priority job's C++ plane did itself (docs/data-plane.md)
            "preemptions": shared.get("counters", {}).get("preemptions"),
            "preemptions_by_planes": shared.get("counters", {}).get("preemptions_by_planes")}


PREEMPTION = Step(
    key="preemption", title="preemption delay",
    what="a high-priority 1-block kernel's launch-to-completion with a best-effort PTB kernel filling the device, "
         "minus alone: p50/p99 (goal <= 40 us p99)",
    budget_s=50, quick_budget_s=50, commands=_preemption_commands, figures=_preemption_figures)


# ---- SM shares -----------------------------------------------------------------------------

def _shares(mode: Mode) -> tuple[int, ...]:
    if mode.rehearse:
        return SM_SHARES_CPU
    return SM_SHARES_QUICK if mode.quick else SM_SHARES_GPU


def _sm_share_commands(mode: Mode) -> list[list[str]]:
    # On the GPU: best-effort kernels whole (--be-transform none: the regime of kernels tally
    # cannot rewrite, which only a green context confines, and of the sim study in
    # bench/results/sm-share-sim-2026-11-25.md), at load 0.25, not the default 0.5: the first
    # run's 25 % share at 0.5 (PTB kernels preempted 1551 times in 12 s) doubled each
    # 0.24 ms request and the queue grew for the whole run, so its p99 measured the queue.
    backend = ["--backend", "emulator", "--duration", "1"] if mode.rehearse else \
        ["--backend", "cuda", "--be-args", GPU_FILLER_ARGS, "--duration", "2", "--load", "0.25",
         "--be-transform", "none"]
    return [bench("colocate", "--workload", "cuda", "--policies", "priority", *backend, "--be-sm-percent", str(s),
                  "--json", str(mode.out / f"share-{s}.json"), *workdir(mode, f"share-{s}")) for s in _shares(mode)]


def _sm_share_figures(mode: Mode, output: str) -> dict:
    rows = {}
    for s in _shares(mode):
        report = read_json(mode.out / f"share-{s}.json")
        if report is None or "priority" not in report.get("policies", {}):
            continue
        r = report["policies"]["priority"]
        rows[f"{s}%"] = {"be_normalized_throughput": r["be_normalized_throughput"], "hp_p99_ms": r["hp_p99_ms"],
                         "hp_p99_vs_alone": r["hp_p99_vs_alone"]}
    return {"by_share": rows} if rows else {}


SM_SHARE = Step(
    key="sm-share", title="best-effort SM shares",
    what="the best-effort job's throughput and the high-priority p99 at green-context SM shares, its kernels "
         "whole (the SM ids a share's blocks ran on are checked by pytest-gpu)",
    budget_s=60, quick_budget_s=45, commands=_sm_share_commands, figures=_sm_share_figures)


# ---- extras: suspend / resume / migrate ----------------------------------------------------

def _migration_commands(mode: Mode) -> list[list[str]]:
    backend = ["--backend", "emulator", "--footprints", "16"] if mode.rehearse else \
        ["--backend", "cuda", "--footprints", "64" if mode.quick else "64,1024"]
    return [bench("migrate", *backend, "--json", str(mode.out / "migrate.json"))]


def _migration_figures(mode: Mode, output: str) -> dict:
    rows = read_json(mode.out / "migrate.json")       # a list of rows (tally/bench/migrate_report.py)
    return {"rows": rows} if isinstance(rows, list) else {}


MIGRATION = Step(
    key="migrate", title="suspend, resume and migrate (--suspendable)",
    what="a job's suspend/resume and migration time between two servers on one GPU against its footprint",
    budget_s=15, quick_budget_s=15, commands=_migration_commands, figures=_migration_figures)


# ---- JIT capture: a torch.compile'd best-effort job with and without its kernels' PTX ------

def _jit_capture_commands(mode: Mode) -> list[list[str]]:
    """The same co-location twice, the best-effort job's kernels compiled at run time: with
    tally-run's JIT capture (they come with their PTX, so they can be sliced and
    preempted) and with --no-jit-capture (they run whole)."""
    def run(name: str, *args: str) -> list[str]:
        return bench("colocate", *args, "--json", str(mode.out / f"{name}.json"), *workdir(mode, name))
    if mode.rehearse:       # the plumbing only: CUDA C++ jobs compile nothing at run time
        common = ["--backend", "emulator", "--workload", "cuda", "--policies", "priority", "--duration", "1"]
    else:
        # A 4-layer encoder keeps Inductor's first compile (each best-effort start) short.
        common = ["--backend", "cuda", "--workload", "torch", "--hp-job", "bert-base", "--be-job",
                  "bert-train-compiled", "--be-args", "--layers 4", "--policies", "priority",
                  "--duration", "2" if mode.quick else "3"]
    return [run("captured", *common), run("not-captured", *common, "--be-run-args=--no-jit-capture")]


def _jit_capture_figures(mode: Mode, output: str) -> dict:
    figures = _colocate_step_figures(mode, output)      # "captured" and "not-captured"
    both = [figures.get(n, {}).get("policies", {}).get("priority") for n in ("captured", "not-captured")]
    if all(both):
        figures["p99_captured_vs_not"] = both[0]["p99_ms"] / both[1]["p99_ms"]
    return figures


JIT_CAPTURE = Step(
    key="jit-capture", title="JIT capture next to inference",
    what="BERT-base at high priority next to torch.compile'd encoder training (Inductor's Triton kernels) at "
         "best effort, with tally-run's JIT capture and with --no-jit-capture: p99 and throughputs of each",
    budget_s=150, quick_budget_s=110, commands=_jit_capture_commands, figures=_jit_capture_figures)
