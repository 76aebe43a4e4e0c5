"""A device fault on the cuda backend, end to end without a GPU: a cuda-backend
tally-server runs as a job of an emulator server (tests/test_cuda_backend_nested.py
says how), so tally's own driver reports the fault to the cuda backend and keeps it
sticky, as a GPU's driver does. One best-effort job writes through a wild pointer
next to a high-priority job: the server names the best-effort job as the cause,
fails both jobs with that explanation (the high-priority job's device state is lost
too: one context holds every job's), recreates its context and runs the next job
(tests/device_fault_scenario.py). tests/test_e2e_gpu_faults.py does the same on a
GPU, where the fault is noticed by the server's watch of its context instead."""
from __future__ import annotations

import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from device_fault_scenario import check_fault_recovery, explanations
from e2e_helpers import CUDA_ERROR_ILLEGAL_ADDRESS, build_cuda, emulator_server_process, finish, run_job, start_job
from test_cuda_backend_nested import NestedCudaServer


@pytest.fixture
def cuda_server():
    under = emulator_server_process()
    server = NestedCudaServer(under, metrics=True)
    yield server
    server.stop()
    under.stop()


def device_faults_counted(server) -> float:
    port = re.search(r"metrics on port (\d+)", server.process.log())[1]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "tally_device_faults"]
    return family.samples[0].value


def test_a_best_effort_jobs_fault_fails_every_job_and_the_server_recovers(nvcc, cuda_server):
    assert device_faults_counted(cuda_server) == 0
    check_fault_recovery(nvcc, cuda_server)
    assert device_faults_counted(cuda_server) == 1
    # the outer server still serves the nested one, which lost nothing it did not own
    outer = cuda_server.under.status()
    assert [c["state"] for c in outer["clients"]] == ["running"]


def test_jobs_with_unconfirmed_kernels_are_all_named(nvcc, cuda_server):
    # The high-priority job's last kernel was never synchronized when the fault was
    # seen: it may have been the one that faulted (on a GPU nothing says which kernel
    # did), so both jobs are named.
    hp = start_job(cuda_server.socket, build_cuda(nvcc, "fault_bystander.cu"), "unsynced", priority="high")
    assert hp.stdout.readline().split() == ["ready", "good=4096"]
    be = run_job(cuda_server.socket, build_cuda(nvcc, "illegal_address.cu"), priority="best-effort", timeout=300)
    assert be.value("sync") == str(CUDA_ERROR_ILLEGAL_ADDRESS), be.stdout + be.stderr
    fault = cuda_server.wait_for(lambda s: (s["server"]["last_device_fault"] or {}).get("state") == "recovered",
                                 timeout=120, what="the recovery")["server"]["last_device_fault"]
    assert len(fault["caused_by"]) == 2 and fault["caused_by"] == fault["jobs_failed"]
    [told] = explanations(be.stderr)
    hp_id, be_id = fault["caused_by"]
    assert (f"device fault: a kernel of one of client {hp_id} (pid " in told and f", client {be_id} (pid " in told
            and "(each had kernels that no synchronization had found done yet, and a GPU does not say whose "
                "kernel faulted)" in told), told
    hp.stdin.write("go\n")
    hp.stdin.flush()
    assert finish(hp).ints("after_copy", "after_sync", "after_malloc") == [CUDA_ERROR_ILLEGAL_ADDRESS] * 3
