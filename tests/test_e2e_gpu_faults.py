"""A real illegal address on a GPU next to a high-priority job (`pytest -m gpu`):
the fault poisons the context every job shares, the server notices it (its watch
of the context: the driver never reports the faulted kernel's completion), names
the best-effort job that caused it, fails both jobs with that explanation,
recreates the context and runs the next jobs (tests/device_fault_scenario.py).
tests/test_cuda_backend_faults.py runs the same scenario without a GPU."""
from __future__ import annotations

import pytest
from device_fault_scenario import check_fault_recovery
from e2e_helpers import Server

from tally.backends.registry import real_driver_present

pytestmark = pytest.mark.gpu


@pytest.fixture
def cuda_server():
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    server = Server("cuda")
    yield server
    server.stop()


def test_an_illegal_address_next_to_a_high_priority_job_on_the_gpu(nvcc, cuda_server):
    check_fault_recovery(nvcc, cuda_server)
    assert cuda_server.alive()
