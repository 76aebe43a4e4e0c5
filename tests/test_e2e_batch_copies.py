"""cuMemcpyBatchAsync and cuMemcpy3DBatchAsync under tally-run on the emulator
(tests/cuda/programs/batch_copies.cu): host-to-device copies with two sets of attributes
(one read during the call from a buffer overwritten right after it), device-to-device and
device-to-host batches, a batch captured into a graph and replayed, 3-D batches through a
2-D CUDA array and a pitched host buffer, and the arguments cuda.h refuses, at both
priorities."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401  (fixture)

from tally import paths


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "batch_copies.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_batched_copies_land_whole_in_stream_order_and_in_graphs(emulator_server, program, priority):
    job = run_job(emulator_server.socket, program, priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert [job.value(k) for k in ("h2d", "through", "graph", "refused")] == ["0", "0", "0", "4"], job.stdout
    assert [job.value(k) for k in ("batch3d", "refused3d")] == ["0", "2"], job.stdout
