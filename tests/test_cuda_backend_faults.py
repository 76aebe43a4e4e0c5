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

import pytest
from device_fault_scenario import check_fault_recovery
from e2e_helpers import emulator_server_process
from test_cuda_backend_nested import NestedCudaServer


@pytest.fixture
def cuda_server():
    under = emulator_server_process()
    server = NestedCudaServer(under)
    yield server
    server.stop()
    under.stop()


def test_a_best_effort_jobs_fault_fails_every_job_and_the_server_recovers(nvcc, cuda_server):
    check_fault_recovery(nvcc, cuda_server)
    # the outer server still serves the nested one, which lost nothing it did not own
    outer = cuda_server.under.status()
    assert [c["state"] for c in outer["clients"]] == ["running"]
