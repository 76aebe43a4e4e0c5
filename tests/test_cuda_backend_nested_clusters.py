"""Thread-block clusters through the cuda backend without a GPU: the nested cuda-backend
server (tests/test_cuda_backend_nested.py) forwards each cluster launch of
tests/cuda/programs/clusters.cu to its driver with cuLaunchKernelEx and
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (tally/backends/cuda_clusters.py); that driver is
tally's libcuda in front of an emulator server, which runs the clusters."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, run_job
from test_cuda_backend_nested import cuda_server  # noqa: F401  (one nested cuda-backend server for the module)
from test_e2e_clusters import SM90, check_cluster_job, check_whole_runs_logged


def launches_forwarded(server) -> int:
    """LaunchKernel requests the nested server (the outer server's only client) sent."""
    [nested] = server.under.status()["clients"]
    return nested["requests_by_kind"].get("LaunchKernel", 0)


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_cluster_launches_reach_the_driver(nvcc, cuda_server, priority):
    program = build_cuda(nvcc, "clusters.cu", flags=SM90)
    before = launches_forwarded(cuda_server)
    job = run_job(cuda_server.socket, program, priority=priority, timeout=300)
    check_cluster_job(job)
    # neighbour, cluster_sum (2x2), the 16-block one and the required-shape one: every
    # launch the job's driver accepted went on to the driver behind the cuda backend
    assert launches_forwarded(cuda_server) - before >= 4
    if priority == "best-effort":
        check_whole_runs_logged(cuda_server.process.log())
