"""tools/peer_suites.py: other projects' CUDA test suites under tally-run. The fast
subset CI runs: a handful of numba-cuda's own test modules (driver events and streams,
a kernel compiled and launched, device arrays) from the test environment, each its
own job against one emulator server; the whole of cudadrv and cudapy (~150 modules,
about an hour on two cores), cuda-bindings' test_cuda.py (a cuda-python checkout) and
CuPy's core tests (a CuPy checkout) are opt-in (README: "Peer suites")."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import peer_suites  # noqa: E402

FAST_MODULES = "test_events,test_streams,test_array_attr,test_sync,test_freevar,test_boolean"


def test_causes_are_grouped_alike():
    a = peer_suites.cause("AssertionError: 0 != 400\nmore detail")
    b = peer_suites.cause("AssertionError: 0 != 128")
    assert a == b == "AssertionError: N != N"
    assert peer_suites.cause("CudaAPIError: [700] at 0x7f00aa") == "CudaAPIError: [N] at <addr>"
    # pytest says only "collection failure" when a module does not import: its E line says why
    text = "Traceback...\nE   ModuleNotFoundError: No module named 'filecheck'\n"
    assert peer_suites.cause("collection failure", text) == "ModuleNotFoundError: No module named 'filecheck'"


def test_junit_counts(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="m.T" name="a"/>'
        '<testcase classname="m.T" name="b"><failure message="AssertionError: 1 != 2">x</failure></testcase>'
        '<testcase classname="m.T" name="c"><error message="RuntimeError: boom">x</error></testcase>'
        '<testcase classname="m.T" name="d"><skipped message="needs 2 GPUs"/></testcase>'
        '</testsuite></testsuites>')
    module = peer_suites.Module("numba-cudadrv", Path("test_x.py"))
    peer_suites.read_junit(report, module)
    assert (module.passed, module.failed, module.skipped) == (1, 2, 1)
    assert module.failures == [("m.T.b", "AssertionError: N != N"), ("m.T.c", "RuntimeError: boom")]
    assert module.skips == ["needs N GPUs"]


def test_numba_cuda_modules_pass_under_tally(tmp_path):
    pytest.importorskip("filecheck", reason="numba-cuda's tests import filecheck: pip install -e '.[test]'")
    pytest.importorskip("numba.cuda", reason="numba-cuda is in the test extra: pip install -e '.[test]'")
    out = tmp_path / "peers.json"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "peer_suites.py"), "--venv", sys.prefix,
                           "--suites", "numba-cudadrv,numba-cudapy", "--modules", FAST_MODULES,
                           "--timeout", "600", "--json", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    ran = {m["path"].rsplit("/", 1)[-1] for m in report["modules"]}
    assert ran == {f"{name}.py" for name in FAST_MODULES.split(",")}
    suites = report["suites"]
    assert sum(s["passed"] for s in suites.values()) >= 20, done.stdout
    assert sum(s["failed"] for s in suites.values()) == 0, done.stdout
    server = report["server"]
    assert server["alive"] and server["max_attached_after_job"] == 0 and server["held_bytes_end"] == 0, server


def test_triton_cases_are_spread_over_each_functions_parameters():
    cases = [f"t[{i}]" for i in range(10)]
    assert peer_suites.spread(cases, 3) == ["t[0]", "t[4]", "t[9]"]          # first, middle, last
    assert peer_suites.spread(cases, 0) == cases and peer_suites.spread(cases[:2], 5) == cases[:2]
    assert peer_suites.spread(cases, 1) == ["t[0]"]


def test_cupy_core_modules_are_named_by_their_place(tmp_path):
    core = tmp_path / "tests" / "cupy_tests" / "core_tests"
    (core / "fusion_tests").mkdir(parents=True)
    for path in (core / "test_reduction.py", core / "fusion_tests" / "test_reduction.py", core / "helper.py"):
        path.write_text("")
    found = peer_suites.modules(Path(sys.executable), ["cupy-core"], None, set(), tmp_path)
    assert [m.label for m in found] == ["fusion_tests.test_reduction", "test_reduction"]
    only = peer_suites.modules(Path(sys.executable), ["cupy-core"], None, {"fusion_tests.test_reduction"}, tmp_path)
    assert [m.path for m in only] == [core / "fusion_tests" / "test_reduction.py"]


def test_cupy_cuda_suite_runs_the_cuda_api_tests(tmp_path):
    cuda = tmp_path / "tests" / "cupy_tests" / "cuda_tests"
    (cuda / "memory_hooks_tests").mkdir(parents=True)
    for path in (cuda / "test_graph.py", cuda / "memory_hooks_tests" / "test_debug_print.py"):
        path.write_text("")
    found = peer_suites.modules(Path(sys.executable), ["cupy-cuda"], None, set(), tmp_path)
    assert [(m.suite, m.label) for m in found] == [("cupy-cuda", "memory_hooks_tests.test_debug_print"),
                                                   ("cupy-cuda", "test_graph")]
