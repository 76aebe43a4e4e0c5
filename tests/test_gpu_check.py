"""`tally-bench gpu-check`, the GPU kit, without a GPU: its plan (--dry-run), its
wheel list and scripts, its runner's limits, its results file, the PyTorch job
scripts it starts on a GPU (compiled here; run where torch is installed), and
its quick rehearsal on the CPU emulator end to end.

The quick rehearsal runs every step with small sizes and without the install
(about 100 s on a 2-core machine, under CI's 2-minute share for it). The full
rehearsal adds the offline install into a fresh Python 3.12 venv, which builds
tally's C++ again (minutes): opt-in, with TALLY_GPU_KIT_FULL_REHEARSAL=1 after
tools/gpu_wheels.sh --rehearsal."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tally.backends.registry import real_driver_present
from tally.bench.gpu_check import install, job_matrix, plan, report
from tally.bench.gpu_check.device import Device
from tally.bench.gpu_check.step import Step
from tally.bench.gpu_check.runner import FAILED, NOT_STARTED, PASSED, TIMED_OUT, StepResult, run_steps
from tally.bench.process_jobs import JOBS_DIR, PROGRAMS
from tally.cli.bench_main import main as bench_main

ROOT = Path(__file__).resolve().parent.parent
STEP_KEYS = ("pytest-gpu", "jobs", "launch", "colocate", "preemption", "sm-share", "device-fault", "nvml-metrics",
             "migrate")


# ---- the plan ------------------------------------------------------------------------------

def test_the_plan_fits_one_device_call_in_order_of_value():
    steps = plan.steps()
    assert tuple(s.key for s in steps) == STEP_KEYS
    assert plan.INSTALL_BUDGET_S + sum(s.budget_s for s in steps) <= plan.DEVICE_CALL_S
    assert all(0 < s.quick_budget_s <= s.budget_s for s in steps)


def test_dry_run_prints_steps_budgets_commands_and_wheels(capsys):
    assert bench_main(["gpu-check", "--dry-run", "--repo", str(ROOT)]) == 0
    out = capsys.readouterr().out
    for step in plan.steps():
        assert f"{step.key:<16} {step.budget_s:4d} s" in out
    assert "launch --backend cuda" in out and "--workload torch --hp-job bert-base --be-job resnet50-train" in out
    tests = ROOT / "tests"
    assert "--hp-job gpt2-graphs" in out and f"-m gpu {tests}/" in out and f" {tests}/test_e2e_gpu.py " in out
    assert "install" in out and f"of one {plan.DEVICE_CALL_S} s device call" in out and "OVER" not in out
    for wheel in install.read_wheels()["carry"]:
        assert wheel in out


def test_dry_run_of_the_rehearsal_shows_the_emulator_commands(capsys):
    assert bench_main(["gpu-check", "--dry-run", "--rehearse", "--quick", "--steps", "launch,preemption",
                       "--repo", str(ROOT)]) == 0
    out = capsys.readouterr().out
    assert "2 steps on the CPU emulator" in out and "launch --backend null" in out
    assert "--hp-job preempt-probe" in out and "--backend emulator" in out and "0. install" not in out


def test_the_jit_capture_step_is_optional_and_compares_capture_on_and_off(capsys):
    assert "jit-capture" not in {s.key for s in plan.steps()}
    assert [s.key for s in plan.select("launch,jit-capture")] == ["launch", "jit-capture"]
    assert bench_main(["gpu-check", "--dry-run", "--repo", str(ROOT)]) == 0
    assert "optional (--steps jit-capture" in capsys.readouterr().out
    assert bench_main(["gpu-check", "--dry-run", "--steps", "jit-capture", "--repo", str(ROOT)]) == 0
    out = capsys.readouterr().out
    assert "--be-job bert-train-compiled" in out and out.count("--be-job bert-train-compiled") == 2
    assert out.count("--be-run-args=--no-jit-capture") == 1 and "optional (" not in out
    assert bench_main(["gpu-check", "--dry-run", "--rehearse", "--steps", "jit-capture", "--repo", str(ROOT)]) == 0
    out = capsys.readouterr().out
    assert "--backend emulator --workload cuda" in out and "--be-run-args=--no-jit-capture" in out


def test_unknown_steps_are_refused_with_the_list(capsys):
    assert bench_main(["gpu-check", "--dry-run", "--steps", "launch,warp-drive"]) == 2
    err = capsys.readouterr().err
    assert "no step warp-drive" in err and "pytest-gpu, jobs, launch, colocate" in err


@pytest.mark.skipif(real_driver_present(), reason="a GPU is here: gpu-check would run its steps")
def test_without_a_gpu_it_says_to_rehearse(capsys, tmp_path):
    assert bench_main(["gpu-check", "--repo", str(ROOT), "--out", str(tmp_path)]) == 2
    assert "no NVIDIA driver and GPU here; --rehearse" in capsys.readouterr().err


def test_the_full_rehearsal_needs_the_wheels(capsys, tmp_path):
    assert bench_main(["gpu-check", "--rehearse", "--repo", str(ROOT), "--out", str(tmp_path)]) == 2
    assert "tools/gpu_wheels.sh --rehearsal" in capsys.readouterr().err


# ---- the wheels and the scripts ------------------------------------------------------------

def test_the_wheel_list_pins_what_the_install_needs():
    wheels = install.read_wheels()
    carried = {w.split("==")[0] for w in wheels["carry"]}
    # tally's own needs the GPU image lacks, and the build's gRPC stub generator
    assert {"zstandard", "lz4", "pyelftools", "arpy", "grpcio-tools"} <= carried
    image = {w.split("==")[0] for w in wheels["image"]}
    assert {"numpy", "cuda-bindings", "msgpack", "prometheus-client", "pytest", "pytest-timeout"} <= image
    assert not carried & image


def test_a_bad_wheel_line_is_refused(tmp_path):
    bad = tmp_path / "wheels.txt"
    bad.write_text("[carry]\nzstandard>=0.25\n")
    with pytest.raises(ValueError, match=r"'zstandard>=0.25' is not a pinned requirement"):
        install.read_wheels(bad)


def test_missing_wheels_are_named(tmp_path):
    (tmp_path / "lz4-4.4.5-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"")
    assert install.missing_wheels(tmp_path, ["lz4==4.4.5", "grpcio-tools==1.85.1"]) == ["grpcio-tools==1.85.1"]


def test_gpu_check_sh_runs_the_kits_install_and_the_kit():
    script = (ROOT / "tools/gpu_check.sh").read_text()
    assert '-m pip install --no-index --no-build-isolation --find-links "$wheels" "$root"' in script
    assert " ".join(install.INSTALL_FLAGS) in script
    assert '-m pip install --no-index --find-links "$wheels" $build_requires' in script
    assert "gpu-check --out /tmp/tally-gpu-check --bundle \"$out\"" in script and "CUDA_HOME" in script
    assert '-m pip install --no-index --find-links "$wheels" ' + " ".join(install.KIT_TOOLS) in script
    wheels_sh = (ROOT / "tools/gpu_wheels.sh").read_text()
    assert "tally/bench/gpu_check/wheels.txt" in wheels_sh and "--python-version 3.12" in wheels_sh
    for path in ("tools/gpu_check.sh", "tools/gpu_wheels.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / path)], check=False).returncode == 0
    ignored = (ROOT / ".gitignore").read_text()
    assert f"/{install.WHEELS_DIR}/" in ignored and f"/{install.IMAGE_WHEELS_DIR}/" in ignored


# ---- the runner: limits and a result file per step -----------------------------------------

def _step(key: str, code: str, budget: int) -> Step:
    return Step(key=key, title=key, what=key, budget_s=budget, quick_budget_s=budget,
                commands=lambda mode: [[sys.executable, "-c", code]],
                figures=lambda mode, output: {"said": output.strip().splitlines()[:1]})


def test_steps_are_stopped_at_their_budget_and_skipped_past_the_deadline(tmp_path):
    seen = []
    steps = (_step("quick", "print('done')", 5), _step("slow", "import time; print('start', flush=True); "
                                                              "time.sleep(60)", 1),
             _step("failing", "raise SystemExit(3)", 5), _step("late", "print('never')", 50))
    began = time.monotonic()
    results = run_steps(steps, rehearse=True, quick=True, repo=ROOT, out=tmp_path, deadline_s=40,
                        on_result=lambda rs: seen.append([r.key for r in rs]))
    assert time.monotonic() - began < 30
    assert [r.status for r in results] == [PASSED, TIMED_OUT, FAILED, NOT_STARTED]
    assert results[0].figures == {"said": ["done"]} and results[1].figures == {"said": ["start"]}
    assert results[2].exit_codes == [3] and "needs 50 s" in results[3].note
    assert seen == [["quick"], ["quick", "slow"], ["quick", "slow", "failing"], ["quick", "slow", "failing", "late"]]
    written = json.loads((tmp_path / "02-slow.json").read_text())
    assert written["status"] == TIMED_OUT and "budget 1 s" in written["note"]
    assert (tmp_path / "01-quick" / "output.log").read_text() == "done\n"
    # the overrun step's processes, named before they were stopped (their threads too, where
    # py-spy is installed, as the kit installs it on the GPU machine)
    dump = (tmp_path / "02-slow" / "stall-dump.txt").read_text()
    assert dump.startswith("processes: ") and "none found" not in dump.splitlines()[0], dump
    assert "=== pid" in dump or "py-spy is not installed" in dump, dump



def test_steps_run_from_their_own_folder_never_the_repository(tmp_path, monkeypatch):
    # Found on the first GPU run: from the repository root, the gpu tests' servers
    # (`python -m tally.cli.server_main`) imported the source tree's tally, which has no
    # built C++, and every test that starts a server errored.
    monkeypatch.chdir(ROOT)
    results = run_steps((_step("where", "import os; print(os.getcwd())", 10),), rehearse=True, quick=True,
                        repo=ROOT, out=tmp_path, deadline_s=20, on_result=lambda rs: None)
    assert results[0].figures == {"said": [str(tmp_path / "01-where")]}


def test_a_job_matrix_cell_whose_server_cannot_start_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(job_matrix.VARIANTS, "broken", ("--no-such-flag",))
    job = job_matrix.Job("dense-inference", "dense-inference", "cuda", "high", (), ("broken", job_matrix.NATIVE))
    [broken, native] = job_matrix.run_matrix((job,), "emulator", tmp_path, timeout_s=30)
    assert broken.result == job_matrix.FAILED and "tally-server did not start" in broken.check
    assert (native.result, native.check) == (job_matrix.NOT_RUN, "no GPU: nothing runs natively")
    assert "dense-inference        broken        failed" in job_matrix.format_cells([broken, native])

def test_the_comparison_sets_the_figures_beside_tallys():
    colocate = StepResult(3, "colocate", "co-location", PASSED, 150, figures={"bert-resnet": {"policies": {
        "priority": {"p99_vs_alone": 1.09, "system_throughput": 1.52}}}})
    preemption = StepResult(4, "preemption", "preemption", PASSED, 35, figures={"delay_p99_us": 31.0})
    text = report.comparison([colocate, preemption], rehearse=False)
    assert "p99 is +9.0% against alone (Tally: 7.2%), system throughput 1.52 (Tally: ~1.44)" in text
    assert "preemption delay's p99 is 31 us (goal <= 40 us" in text and "rehearsal" not in text
    assert "NOT comparable" in report.comparison([colocate], rehearse=True)
    assert "nothing to set beside" in report.comparison([], rehearse=False)
    page = report.markdown([colocate], Device("NVIDIA H200", "580.159.03", "143771 MiB", "gpu-host"),
                           "2026-12-03 18:00", "tally-bench gpu-check", False, False, 405, None)
    assert "# GPU kit on NVIDIA H200" in page and "driver: 580.159.03" in page and "| 3 | colocate | passed" in page
    assert Device("NVIDIA H200", "", "", "").slug() == "nvidia-h200"


# ---- the PyTorch job scripts (a GPU's; checked here) ---------------------------------------

TORCH_SCRIPTS = sorted(JOBS_DIR.glob("torch_*.py"))


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda p: p.name)
def test_torch_job_scripts_compile(script):
    compile(script.read_text(), str(script), "exec")


def test_every_torch_program_names_a_script_that_exists():
    torch_programs = [p for p in PROGRAMS.values() if p.workload == "torch"]
    assert {p.name for p in torch_programs} >= {"bert-base", "gpt2-graphs", "resnet50-train"}
    for program in torch_programs:
        assert (JOBS_DIR / (program.module.rsplit(".", 1)[1] + ".py")) in TORCH_SCRIPTS


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed here (the GPU machine has it)")
def test_the_gpt2_job_serves_on_the_cpu(tmp_path):
    arrivals = tmp_path / "arrivals"
    arrivals.write_text("0\n0.01\n0.02\n")
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "tally.bench.jobs.torch_decode", "--device", "cpu", "--arrivals",
                           str(arrivals), "--duration", "1", "--out", str(out), "--layers", "1", "--hidden", "32",
                           "--heads", "2", "--context", "8"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(out.read_text())["ok"] is True


# ---- what the full rehearsal found ---------------------------------------------------------

def test_tally_bench_migrate_runs_from_a_folder_holding_a_tally_source_tree(tmp_path):
    """The kit runs from the repository root; its servers must start from the installed
    tally, not the source tree there (`python -m` would import the one in the folder)."""
    shadow = tmp_path / "tally"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the source tree, without its built C++')\n")
    from tally.cli import commands
    done = subprocess.run([*commands.python_module("tally.cli.bench_main"), "migrate", "--backend", "emulator",
                           "--footprints", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| 1 MiB |" in done.stdout


# ---- the rehearsal, end to end -------------------------------------------------------------

def _rehearse(tmp_path: Path, *extra: str, timeout: int) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "kit"
    done = subprocess.run([sys.executable, "-m", "tally.cli.bench_main", "gpu-check", "--rehearse", "--repo", str(ROOT),
                           "--out", str(out), "--bundle", str(tmp_path / "bundle"), *extra],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return done, out


@pytest.mark.slow
def test_the_quick_rehearsal_runs_every_step_on_the_emulator(tmp_path):
    done, out = _rehearse(tmp_path, "--quick", timeout=400)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert done.stdout.startswith("tally gpu-check plan (--quick): 9 steps on the CPU emulator")
    results = {}
    for i, key in enumerate(STEP_KEYS, 1):
        results[key] = json.loads((out / f"{i:02d}-{key}.json").read_text())
        assert results[key]["status"] == PASSED, results[key]
    assert results["pytest-gpu"]["figures"]["failures"] == 0 and results["pytest-gpu"]["figures"]["tests"] > 0
    assert results["launch"]["figures"]["hp_us_per_launch"] > 0
    cells = results["jobs"]["figures"]["cells"]
    assert cells["dense-inference / graph-nodes"].startswith("right") and \
        cells["long-kernel-training / python-plane"].startswith("right"), cells
    assert cells["dense-inference / native"] == "not run: no GPU: nothing runs natively"
    assert "priority" in results["colocate"]["figures"]["cuda-jobs"]["policies"]
    assert (out / "04-colocate" / "cuda-jobs.png").stat().st_size > 0
    # each co-location run's server log is kept in the step's folder, which the kit bundles
    assert list((out / "04-colocate" / "runs-cuda-jobs").glob("run*/server.log"))
    assert list((out / "05-preemption" / "runs-preemption").glob("run*/server.log"))
    assert results["preemption"]["figures"]["requests"] > 0 and "delay_p99_us" in results["preemption"]["figures"]
    assert results["preemption"]["figures"]["preemptions_by_planes"] is not None
    assert set(results["sm-share"]["figures"]["by_share"]) == {"50%", "100%"}
    scenario = results["device-fault"]["figures"]["scenario"]
    assert scenario["error"] == "CUDA_ERROR_ILLEGAL_ADDRESS" and scenario["jobs_failed"] == 2
    assert scenario["next_job"]["wrong"] == 0
    assert results["nvml-metrics"]["figures"]["nvml_readings"] is False
    assert results["migrate"]["figures"]["rows"][0]["exact"] is True
    [page] = (tmp_path / "bundle").glob("gpu-rehearsal-*-cpu-emulator.md")
    text = page.read_text()
    assert "## against Tally's published figures" in text and "NOT comparable" in text
    assert sorted(p.name for p in (tmp_path / "bundle").iterdir()) == sorted(
        [page.name, "gpu-check.json", "gpu-check-files.tar.gz"])


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TALLY_GPU_KIT_FULL_REHEARSAL") != "1",
                    reason="opt-in (a fresh venv and a C++ build: minutes): TALLY_GPU_KIT_FULL_REHEARSAL=1 after "
                           "tools/gpu_wheels.sh --rehearsal")
def test_the_full_rehearsal_installs_offline_and_runs_every_step(tmp_path):
    python = os.environ.get("TALLY_GPU_KIT_PYTHON", "python3.12")   # a Python 3.12, as on the GPU machine
    done, out = _rehearse(tmp_path, "--wheels", str(ROOT / install.WHEELS_DIR), "--image-wheels",
                          str(ROOT / install.IMAGE_WHEELS_DIR), "--python", python, timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "== install: passed" in done.stdout
