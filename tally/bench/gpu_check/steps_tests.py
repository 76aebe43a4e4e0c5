"""Steps that run tests: the tests marked `gpu`, and the device-fault scenario
with its figures recorded (tests/device_fault_scenario.py)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from tally.bench.gpu_check.step import Mode, Step, read_json
from tally.cli import commands

FAULT_TEST_GPU = "tests/test_e2e_gpu_faults.py"
# Without a GPU the same scenario runs against a cuda-backend server nested in an emulator server.
FAULT_TEST_CPU = "tests/test_cuda_backend_faults.py"
SUMMARY = re.compile(r"^=+ (.*\b(passed|failed|skipped|error|errors|deselected|no tests ran)\b.*) =+$")


def gpu_test_files(repo: Path) -> list[str]:
    """Every test file that marks tests `gpu`, but the fault test (its own step), by its
    full path: the steps run outside the repository (see pytest_argv)."""
    found = [p for p in sorted((repo / "tests").glob("test_*.py")) if "mark.gpu" in p.read_text()]
    return [str(p) for p in found if p != repo / FAULT_TEST_GPU]


def pytest_argv(mode: Mode, files: list[str], marker: str | None, per_test_s: int) -> list[str]:
    # pytest through commands.python_module: from the repository root, `python -m pytest`
    # would import the source tree's tally (without its built C++) instead of the installed one.
    # -o addopts=: the kit picks its markers itself, and pyproject's addopts name a plugin
    # (pytest-benchmark's --benchmark-skip) a GPU machine need not have.
    argv = [*commands.python_module("pytest"), "-o", "addopts=", "-p", "no:cacheprovider", "-rA", "-q",
            f"--timeout={per_test_s}", f"--junitxml={mode.out / 'junit.xml'}"]
    if marker:
        argv += ["-m", marker]
    return argv + files


def _pytest_gpu_commands(mode: Mode) -> list[list[str]]:
    files = gpu_test_files(mode.repo) if mode.repo.is_dir() else ["tests/test_e2e_gpu*.py", "..."]
    return [pytest_argv(mode, files, "gpu", 60 if mode.quick else 90)]


def pytest_figures(mode: Mode, output: str) -> dict:
    """The summary line pytest printed, and the counts of its JUnit file."""
    figures: dict = {}
    for line in reversed(output.splitlines()):
        m = SUMMARY.match(line.strip())
        if m:
            figures["summary"] = m[1]
            break
    junit = mode.out / "junit.xml"
    if junit.is_file():
        root = ElementTree.parse(junit).getroot()
        suite = root if root.tag == "testsuite" else root.find("testsuite")
        if suite is not None:
            for key in ("tests", "failures", "errors", "skipped"):
                figures[key] = int(suite.get(key, 0))
            figures["failed_tests"] = [c.get("name") for c in suite.iter("testcase")
                                       if c.find("failure") is not None or c.find("error") is not None]
            skips = {s.get("message", "") for s in suite.iter("skipped")}
            figures["skip_reasons"] = sorted(skips)[:5]
    return figures


PYTEST_GPU = Step(
    key="pytest-gpu", title="pytest -m gpu",
    what="the tests marked gpu (cuda backend, green-context SM shares, NVML, PyTorch under tally-run, "
         "suspend/migrate), each with a timeout",
    budget_s=80, quick_budget_s=75, commands=_pytest_gpu_commands, figures=pytest_figures)


def _fault_commands(mode: Mode) -> list[list[str]]:
    if mode.rehearse:
        return [pytest_argv(mode, [str(mode.repo / FAULT_TEST_CPU)], None, 120)]
    return [pytest_argv(mode, [str(mode.repo / FAULT_TEST_GPU)], "gpu", 120)]


def _fault_env(mode: Mode) -> dict:
    return {"TALLY_FAULT_RECORD": str(mode.out / "fault.json")}


def _fault_figures(mode: Mode, output: str) -> dict:
    figures = pytest_figures(mode, output)
    scenario = read_json(mode.out / "fault.json")
    if scenario is not None:
        figures["scenario"] = scenario
    return figures


DEVICE_FAULT = Step(
    key="device-fault", title="a device fault next to a high-priority job",
    what="a best-effort job's illegal address: what each job is told and sees, the server's recovery time",
    budget_s=15, quick_budget_s=15, commands=_fault_commands, figures=_fault_figures, env=_fault_env)


def _job_matrix_commands(mode: Mode) -> list[list[str]]:
    return [[*commands.python_module("tally.bench.gpu_check.job_matrix"),
             "--backend", "emulator" if mode.rehearse else "cuda", "--out", str(mode.out / "cells"),
             "--timeout", "45"]]


def _job_matrix_figures(mode: Mode, output: str) -> dict:
    cells = read_json(mode.out / "cells" / "matrix.json")
    if cells is None:
        return {}
    return {"cells": {f"{c['job']} / {c['variant']}": f"{c['result']}: {c['check']}" for c in cells}}


JOB_MATRIX = Step(
    key="jobs", title="the jobs natively and under tally",
    what="each job program alone (GPT-2 by CUDA graph and eagerly, BERT-base, ResNet-50 training, a CUDA C++ job), "
         "natively and against its own tally-server (default, graphs node by node, Python data plane), at once: "
         "right or WRONG by the job's own check",
    budget_s=50, quick_budget_s=50, commands=_job_matrix_commands, figures=_job_matrix_figures)
