"""tally's CUPTI (client_preload/src/cupti/): a program written against CUPTI's
activity and callback APIs, linked with NVIDIA's libcupti as any profiler is, under
tally-run on the emulator. Its records come from tally: kernels, copies and memsets
with device times, the driver's launch call, the external correlation ids the
program pushed, and the resource callback for the context; the kinds tally cannot
record are refused with CUPTI_ERROR_NOT_SUPPORTED and a line saying why."""
from __future__ import annotations

import re

import pytest
from e2e_helpers import CUDA_HOME, build_cuda, emulator_server, run_job  # noqa: F401


def cupti_library_dir():
    for folder in (CUDA_HOME / "lib64", CUDA_HOME / "extras" / "CUPTI" / "lib64", CUDA_HOME / "lib"):
        if list(folder.glob("libcupti.so*")):
            return folder
    return None


@pytest.fixture(scope="module")
def program(nvcc):
    folder = cupti_library_dir()
    if folder is None:
        pytest.skip(f"the toolkit at {CUDA_HOME} ships no libcupti")
    return build_cuda(nvcc, "cupti_activity.cu", flags=(f"-L{folder}", "-lcupti", "-Xlinker", f"-rpath={folder}"))


def lines(stdout: str, kind: str) -> list[dict]:
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in stdout.splitlines() if line.startswith(kind + " ")]


def test_records_of_kernels_copies_and_memsets_with_their_correlation(emulator_server, program):
    job = run_job(emulator_server.socket, program)
    assert job.returncode == 0, job.stdout + job.stderr
    [kernel] = lines(job.stdout, "kernel")
    assert kernel["name"] == "_Z5scalePfif"
    assert (kernel["grid"], kernel["block"], kernel["dyn_shared"]) == ("8", "128", "512")
    assert kernel["start_le_end"] == "1"
    copies = lines(job.stdout, "memcpy")
    assert [(c["kind"], c["bytes"], c["async"]) for c in copies] == [
        ("HTOD", "4000", "0"), ("DTOD", "4000", "1"), ("DTOH", "4000", "0")]
    assert all(c["start_le_end"] == "1" for c in copies)
    [memset] = lines(job.stdout, "memset")
    assert (memset["bytes"], memset["value"]) == ("4000", "0")
    # the memset, the first two copies and the kernel ran inside external id 42; the last copy after its pop
    inside = [memset, copies[0], kernel, copies[1]]
    assert [r["ext"] for r in inside] == ["42"] * 4 and copies[2]["ext"] == "-1"
    correlations = [int(r["corr"]) for r in inside + [copies[2]]]
    assert correlations == sorted(set(correlations))   # one id per call, in call order
    # the launch's driver record shares the kernel's correlation id and began before the kernel ended
    [driver] = lines(job.stdout, "driver")
    assert driver == {"cbid": "cuLaunchKernel", "corr": kernel["corr"], "api_before_kernel_end": "1"}
    [summary] = lines(job.stdout, "summary")
    assert summary == {"contexts_created": "1", "dropped": "0", "popped": "42", "result": "6000.0"}


def test_kinds_tally_cannot_record_are_refused_with_the_reason(emulator_server, program):
    job = run_job(emulator_server.socket, program)
    assert job.returncode == 0, job.stdout + job.stderr
    assert lines(job.stdout, "refused") == [{"kind": "5", "result": "CUPTI_ERROR_NOT_SUPPORTED"},
                                            {"kind": "17", "result": "CUPTI_ERROR_NOT_SUPPORTED"}]
    assert "cuptiActivityEnable(kind 5) refused: runtime API records need the CUDA runtime's tool hooks" in job.stderr
    assert "cuptiActivityEnable(kind 17) refused: tally does not record profiler overhead" in job.stderr


def test_a_profiler_without_buffers_loses_its_records_and_nothing_else(emulator_server, program):
    job = run_job(emulator_server.socket, program, "no-buffer")
    assert job.returncode == 0, job.stdout + job.stderr
    assert lines(job.stdout, "kernel") == [] and lines(job.stdout, "memcpy") == []
    [summary] = lines(job.stdout, "summary")
    assert int(summary["dropped"]) >= 10 and summary["result"] == "6000.0"
    assert "the job's buffer callback gave no buffer; activity records are dropped" in job.stderr
    again = run_job(emulator_server.socket, program)   # the server carries on
    assert again.returncode == 0 and "result=6000.0" in again.stdout


def test_a_profiler_that_never_flushes_gets_its_full_buffers_back(emulator_server, program):
    """Past 1024 timed calls waiting, the finished ones become records; full buffers go
    back to the job before it flushes, as CUPTI's do, and nothing is lost."""
    job = run_job(emulator_server.socket, program, "many", 2500, timeout=600)
    assert job.returncode == 0, job.stdout + job.stderr
    [many] = lines(job.stdout, "many")
    assert int(many["kernels"]) == 2501            # the first kernel and the 2500
    assert int(many["buffers_before_flush"]) >= 2


def test_the_same_records_through_the_cuda_backend(program):
    """The cuda backend times the events with its driver's cuEventElapsedTime: here that
    driver is tally's libcuda in front of an emulator server (the nested cuda backend of
    test_cuda_backend_nested.py), the CPU stand-in for a GPU run."""
    from e2e_helpers import emulator_server_process
    from test_cuda_backend_nested import NestedCudaServer
    under = emulator_server_process()
    server = NestedCudaServer(under)
    try:
        job = run_job(server.socket, program, timeout=300)
        assert job.returncode == 0, job.stdout + job.stderr
        [kernel] = lines(job.stdout, "kernel")
        assert kernel["name"] == "_Z5scalePfif" and kernel["start_le_end"] == "1" and kernel["ext"] == "42"
        assert [c["kind"] for c in lines(job.stdout, "memcpy")] == ["HTOD", "DTOD", "DTOH"]
        assert lines(job.stdout, "summary")[0]["result"] == "6000.0"
    finally:
        server.stop()
        under.stop()
