"""Thread-block clusters end to end: tests/cuda/programs/clusters.cu (nvcc -arch=sm_90,
__cluster_dims__, cooperative_groups::this_cluster(), map_shared_rank, cluster.sync(),
cudaLaunchKernelEx with a cluster attribute, also captured into a graph and replayed)
under tally-run on the emulator, as a high-priority and as a best-effort job: the
results, the occupancy calculator's answers, CUDA's codes for the launches the driver
refuses with the reasons in the job's log, and the job and the server carrying on."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401

CUDA_ERROR_INVALID_CLUSTER_SIZE = 912   # cudaErrorInvalidClusterSize has the same number
CUDA_ERROR_NOT_PERMITTED = 800          # cudaErrorNotPermitted
SM90 = ("-arch=sm_90",)


@pytest.fixture(scope="module")
def clusters_program(nvcc):
    return build_cuda(nvcc, "clusters.cu", flags=SM90)


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_cluster_program_under_tally(clusters_program, emulator_server, priority):
    job = run_job(emulator_server.socket, clusters_program, priority=priority)
    check_cluster_job(job)
    # the server carries on: the next job runs as before
    again = run_job(emulator_server.socket, clusters_program, priority=priority)
    assert again.returncode == 0 and again.ints("neighbour_wrong", "ex_wrong") == [0, 0], again.stdout
    if priority == "best-effort":
        check_whole_runs_logged(emulator_server.process.log())


def check_cluster_job(job) -> None:
    """What clusters.cu must print (also on the cuda backend, test_cuda_backend_nested_clusters.py)."""
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("neighbour_wrong", "ex_wrong", "graph_wrong") == [0, 0, 0], job.stdout
    assert job.ints("too_big", "not_multiple", "wrong_shape") == [CUDA_ERROR_INVALID_CLUSTER_SIZE] * 3
    assert job.ints("non_portable", "non_portable_wrong", "done") == [0, 0, 1]
    # The emulator's 8 SMs are one GPC; 64-thread blocks fit 32 to an SM (its block limit).
    assert job.ints("active_clusters_of_4", "potential") == [64, 8]
    assert job.ints("active_clusters_of_16") == [CUDA_ERROR_INVALID_CLUSTER_SIZE]
    assert job.ints("non_portable_active", "non_portable_potential") == [16, 16]
    refusals = [line for line in job.stderr.splitlines() if "CUDA_ERROR_INVALID_CLUSTER_SIZE" in line]
    assert len(refusals) == 3, job.stderr
    assert "more than 8 blocks" in refusals[0] and "NON_PORTABLE_CLUSTER_SIZE_ALLOWED" in refusals[0]
    assert "not a multiple of the cluster" in refusals[1]
    assert "requires another cluster shape" in refusals[2]
    assert job.ints("set_compiled", "required_wrong") == [CUDA_ERROR_NOT_PERMITTED, 0]
    assert job.value("run_time_attrs") == "2,2,1,0,1" and job.value("compiled_attrs") == "4,1,1,1"


def check_whole_runs_logged(log: str) -> None:
    """A best-effort job's cluster kernels run whole; the server's log says why."""
    assert "kernel _Z11cluster_sumPKiPiS1_ has no ptb variant: clusters: `barrier.cluster.arrive;`" in log, log
    assert ("kernel _Z11cluster_sumPKiPiS1_ is launched with thread-block clusters: its cluster (2, 2, 1) "
            "spans more than x") in log, log
