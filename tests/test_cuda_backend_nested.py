"""The cuda backend end to end without a GPU. A tally-server whose backend is
`cuda` runs under tally-run (tests/nested_cuda_server.py), so the driver it calls
through cuda-bindings is tally's own libcuda.so.1, which forwards every call to a
second tally-server on the emulator. Jobs run against the first server: their
modules, launches (best-effort ones transformed, with PTB state written on the
backend's control stream), copies, events, host functions, graphs and virtual
memory all go through tally/backends/cuda.py, as on a GPU.

Green contexts go the same way: a job's green contexts and SM share become SM caps
on the cuda backend's launches, which it runs in green contexts of its own, made
through tally's libcuda on the emulator (whose %smid shows where blocks ran).

A device fault goes the same way too: tally's driver keeps it sticky, as a GPU's
does, so the cuda backend's server fails every job and recreates its context
(tests/test_cuda_backend_faults.py). What this cannot show is what a real GPU
decides: timing, where blocks run, and whether its driver recovers a faulted
context in the same process. tests/test_e2e_gpu*.py run on one."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from server_harness import ServerProcess

# The GPU tests, collected again here with this module's `cuda_server` (their module
# marks them `gpu`; here they run by default): runtime and driver-API programs, a fault.
from test_e2e_gpu import (  # noqa: F401
    test_driver_api_on_the_gpu,
    test_illegal_address_on_the_gpu,
    test_programs_on_the_gpu,
)
from e2e_helpers import (
    Job,
    Server,
    build_cuda,
    emulator_server_process,
    finish,
    job_command,
    job_env,
    run_job,
    start_job,
)

# The IPC, virtual-memory and robustness tests, collected again here with this module's
# `server` (a cuda-backend server): handles between jobs, reservations and mappings, a
# job killed mid-kernel or inside its host function, quotas, other jobs' memory. (Not
# test_illegal_address_is_the_jobs_error_only: on the cuda backend a fault fails every
# job, tests/test_cuda_backend_faults.py.)
from test_e2e_ipc import (  # noqa: F401
    test_memory_freed_by_its_owner_lives_until_the_last_holder_closes_it,
    test_open_wait_read_write_and_what_is_refused,
)
from test_e2e_robustness import (  # noqa: F401
    test_addresses_the_job_does_not_own,
    test_job_dies_inside_its_host_function,
    test_job_killed_mid_kernel,
    test_jobs_at_once,
    test_memory_of_another_job_is_out_of_reach,
    test_memory_quota,
)
from test_e2e_virtual_memory import (  # noqa: F401
    test_a_job_that_exits_with_memory_mapped_gets_it_back,
    test_another_job_cannot_touch_mapped_memory,
    test_physical_memory_counts_against_the_quota,
    test_reserve_create_map_access_unmap,
)

from test_e2e_cooperative import SM90, check_cooperative_job
# Memory pools (shared with another job too), physical memory shared by file descriptor,
# and a stream wait nobody satisfies, on the cuda backend: pool memory is the backend's
# cuMemAlloc memory, shared physical memory the owner's cuMemCreate handle mapped again.
from test_e2e_memory_pools import (  # noqa: F401
    test_a_pool_allocates_counts_and_refuses_what_cuda_refuses,
    test_pool_memory_counts_against_the_quota,
)
from test_e2e_memory_pools import test_a_pool_allocation_shared_with_another_job  # noqa: F401
from test_e2e_vmm_sharing import test_physical_memory_shared_by_file_descriptor  # noqa: F401
from test_e2e_stream_memory_ops import (  # noqa: F401
    program as stream_memory_ops_program,
    test_a_job_that_exits_with_its_stream_waiting_leaves_nothing,
    test_a_wait_nobody_satisfies_ends_at_eviction_and_others_carry_on,
)

from test_e2e_green_contexts import build_green_contexts, check_green_context_job
from test_e2e_stream_attributes import check_stream_attributes_job

from tally.bench.demo import compile_example

NESTED_SERVER = Path(__file__).with_name("nested_cuda_server.py")


class NestedCudaServer(Server):
    """A cuda-backend server running as a job of `under` (an emulator server)."""

    def __init__(self, under: Server, policy: str = "priority", be_transform: str = "auto", metrics: bool = False,
                 options: tuple[str, ...] = ()):
        """options: nested_cuda_server.py's (e.g. "turnaround-ms=1")."""
        self.under = under
        self.dir = under.dir
        self.socket = under.dir / "cuda.sock"
        command = job_command(under.socket, sys.executable, NESTED_SERVER, self.socket, policy, be_transform,
                              "metrics" if metrics else "-", *options, priority="high")
        self.process = ServerProcess(self.socket, command=command, env=job_env())


@pytest.fixture
def server():
    """A nested cuda-backend server of its own for one test (the name the imported
    IPC, virtual-memory and robustness tests ask for)."""
    under = emulator_server_process()
    nested = NestedCudaServer(under)
    yield nested
    nested.stop()
    under.stop()


@pytest.fixture(scope="module")
def cuda_server():
    under = emulator_server_process()
    server = NestedCudaServer(under)
    status = server.status()["server"]
    assert (status["backend"], status["device_name"]) == ("cuda", "tally emulator"), status
    yield server
    server.stop()
    under.stop()


def test_graphs(nvcc, cuda_server):
    job = run_job(cuda_server.socket, build_cuda(nvcc, "graph_capture.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("rounds_good", "host_calls") == [3, 3]
    job = run_job(cuda_server.socket, build_cuda(nvcc, "graph_nodes.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("host_calls", "host_good", "updated_good", "child_c_last") == [2, 2, 3, 42]


def test_transformed_best_effort_kernels_next_to_a_high_priority_job(nvcc, cuda_server, tmp_path):
    # The demo's jobs: best-effort training (its kernels run as PTB or slices, preempted
    # through the PTB state the backend writes) next to high-priority inference.
    programs = {name: compile_example(nvcc, name, tmp_path) for name in ("inference", "training")}
    be = start_job(cuda_server.socket, programs["training"], 60, priority="best-effort")
    hp = start_job(cuda_server.socket, programs["inference"], 40, priority="high")
    for job in (finish(hp, timeout=300), finish(be, timeout=300)):
        assert job.returncode == 0 and "results correct" in job.stdout, job.stdout + job.stderr
    scheduler = cuda_server.status()["server"]["scheduler"]
    assert scheduler["kernels_ptb"] + scheduler["kernels_sliced"] > 0, scheduler
    assert scheduler["untransformable"] == 0, scheduler



def test_short_best_effort_kernels_batch_in_order_next_to_a_high_priority_job(nvcc, tmp_path):
    # One best-effort unit at a time costs a completion round trip per kernel; the
    # priority policy batches short whole kernels within the turnaround budget
    # (tally/scheduler/whole_durations.py). The emulator's kernels take tens of
    # microseconds, over the default 31.6 us budget, so this server has 5 ms.
    under = emulator_server_process()
    server = NestedCudaServer(under, options=("turnaround-ms=5",))
    try:
        chain = build_cuda(nvcc, "short_kernel_chain.cu")
        be = start_job(server.socket, chain, 400, priority="best-effort")
        hp = start_job(server.socket, compile_example(nvcc, "inference", tmp_path), 20, priority="high")
        for job in (finish(be, timeout=300), finish(hp, timeout=300)):
            assert job.returncode == 0 and "results correct" in job.stdout, job.stdout + job.stderr
        scheduler = server.status()["server"]["scheduler"]
        assert scheduler["kernels_batched"] > 100, scheduler
    finally:
        server.stop()
        under.stop()


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_launches_over_the_default_shared_memory(nvcc, cuda_server, priority):
    # Found on the first GPU run (cuDNN's kernels in ResNet-50 training): the job's
    # cudaFuncSetAttribute stays in its client, so the cuda backend opens each kernel
    # to the device's opt-in limit itself, or the driver refuses the launch. Here the
    # driver underneath is tally's client, which refuses as a GPU's driver does.
    program = build_cuda(nvcc, "big_shared.cu")
    job = run_job(cuda_server.socket, program, "graph", priority=priority)     # a graph's kernel nodes alone
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("graph_wrong_blocks") == [0], job.stdout      # (graph_first_wrong: round:block:got:want)
    job = run_job(cuda_server.socket, program, priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("refused_before_opt_in", "wrong_blocks", "graph_wrong_blocks") == [1, 0, 0], job.stdout

@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_cooperative_and_dependent_launches(nvcc, cuda_server, priority):
    # The cuda backend launches each cooperative kernel with cuLaunchKernelEx and the
    # cooperative attribute: the driver underneath (tally's, on the emulator) counts
    # five cooperative kernels, which it ran with every block resident.
    under_before = cuda_server.under.status()["server"]["scheduler"]["kernels_cooperative"]
    job = run_job(cuda_server.socket, build_cuda(nvcc, "cooperative_launch.cu", flags=SM90), priority=priority)
    check_cooperative_job(job)
    assert cuda_server.under.status()["server"]["scheduler"]["kernels_cooperative"] - under_before == 5
    job = run_job(cuda_server.socket, build_cuda(nvcc, "dependent_launch.cu", flags=SM90), priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("serialized_wrong", "event_wrong") == [0, 0]


def test_stream_attributes(nvcc, cuda_server):
    # The job's four access-policy windows (its stream's, the copy's, the default
    # stream's set and cleared) reach the device: the cuda backend calls
    # cuStreamSetAttribute for each, which the driver underneath counts.
    def windows_applied() -> int:
        return sum(c["requests_by_kind"].get("StreamAccessPolicy", 0) for c in cuda_server.under.status()["clients"])

    before = windows_applied()
    check_stream_attributes_job(run_job(cuda_server.socket, build_cuda(nvcc, "stream_attributes.cu")))
    assert windows_applied() - before == 4


def test_device_printf_goes_to_the_servers_stdout(nvcc, cuda_server):
    # As on a GPU, where NVIDIA's driver writes device printf to the process that owns
    # the context: the tally-server. (The emulator backend sends it to the job.)
    job = run_job(cuda_server.socket, build_cuda(nvcc, "kernel_printf.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert "host: done sync=0" in job.stdout and "kernel 7" not in job.stdout
    assert "kernel 7: block 1 thread 1" in cuda_server.process.log()


@pytest.fixture(scope="module")
def sm32_cuda_server():
    """A nested cuda-backend server over an emulator reporting 32 SMs (an H100's
    partition rules: at least 8 SMs, multiples of 8). Best-effort kernels run whole,
    as cubin-only kernels (PyTorch's) do on a GPU: the emulator runs a PTB kernel's
    workers one after another, so the first one takes every task and %smid would
    show one SM whatever the cap."""
    under = emulator_server_process("--emulate-sms", "32")
    server = NestedCudaServer(under, be_transform="none")
    yield server
    server.stop()
    under.stop()


def test_a_job_with_green_contexts_of_its_own(nvcc, sm32_cuda_server):
    # The job's green-context stream carries an SM cap to the cuda backend, which runs
    # the kernel in a green context of its own (made through tally's libcuda).
    job = run_job(sm32_cuda_server.socket, build_green_contexts(nvcc), 8, priority="high", timeout=300)
    check_green_context_job(job, 32)
    assert "SM shares use green contexts: partitions of at least 8 SMs in multiples of 8, of 32" in (
        sm32_cuda_server.process.log())


def test_a_best_effort_job_with_an_sm_share(nvcc, sm32_cuda_server):
    census = build_cuda(nvcc, "sm_census.cu")

    def run_census(*share: str) -> Job:
        command = [sys.executable, "-m", "tally.cli.run_main", "--server", sm32_cuda_server.socket,
                   "--priority", "best-effort", *share, "--", census, 2, 64, 10]
        r = subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=300, env=job_env(),
                           check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        return Job(r.returncode, r.stdout, r.stderr)

    # 25% of 32 SMs is 8: the job's kernels ran on 8 SMs; without a share on all 32.
    # (%smid is the emulator worker that ran the block: never more than allowed.)
    device_sms, distinct, highest, missed = run_census("--sm-percent", "25").ints(
        "device_sms", "distinct_sms", "max_smid", "blocks_missed")
    assert device_sms == 32 and 1 <= distinct <= 8 and highest <= 7 and missed == 0
    distinct, highest, missed = run_census().ints("distinct_sms", "max_smid", "blocks_missed")
    assert 1 <= distinct <= 32 and highest <= 31 and missed == 0


def test_stream_memory_operations_reach_the_driver(nvcc, cuda_server):
    job = run_job(cuda_server.socket, stream_memory_ops_program(nvcc), "basics", priority="high")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("held", "released", "batch_written", "still_usable") == [1, 1, 1, 1]
    assert job.ints("geq32", "eq32", "and32", "nor32", "geq64", "eq64", "and64", "nor64") == [1] * 8
    # (Not the wait on pinned host memory: here the cuda backend's driver is tally's client,
    # whose server cannot reach the backend's own registration at that address.)
    # Writes reach the driver; waits never hold a device stream (the server polls them,
    # tally/backends/cuda_value_waits.py), so no driver call of this server waits on a value.
    (backend,) = cuda_server.under.status()["clients"]
    calls = backend["requests_by_kind"]
    assert calls.get("StreamWriteValue", 0) >= 18 and "StreamWaitValue" not in calls, calls
