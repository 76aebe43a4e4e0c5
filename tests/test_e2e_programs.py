"""Unmodified CUDA programs, built by nvcc at test time with static cudart
(nvcc's default) and with -cudart shared, run under tally-run against a
tally-server with the emulator backend and print correct results."""
from __future__ import annotations

import pytest
from e2e_helpers import (  # noqa: F401
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    build_cuda,
    build_device_code,
    build_driver_c,
    emulator_server,
    run_job,
)

CUDARTS = pytest.mark.parametrize("shared", [False, True], ids=["static-cudart", "shared-cudart"])


@CUDARTS
def test_vector_add(nvcc, emulator_server, shared):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "vector_add.cu", shared_cudart=shared), 5000)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("n", "wrong", "roundtrip") == [5000, 0, 5000]
    assert float(job.value("c[n-1]")) == 4999 + 2 * 4999 + 1
    assert job.value("peer") == "0" and "done" in job.stdout      # cudaDeviceReset succeeded
    assert "tally:" not in job.stderr


def test_vector_add_with_per_thread_default_streams(nvcc, emulator_server):
    # cudart calls the _ptsz/_ptds entry points; NULL is the thread's own stream.
    program = build_cuda(nvcc, "vector_add.cu", flags=("--default-stream", "per-thread"))
    job = run_job(emulator_server.socket, program, 3000)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("n", "wrong", "roundtrip") == [3000, 0, 3000]


def test_vector_add_through_the_arenas(nvcc, emulator_server):
    # 1 MiB per vector: copies go through the upload and download arenas, not inline.
    job = run_job(emulator_server.socket, build_cuda(nvcc, "vector_add.cu"), 1 << 18)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("wrong", "roundtrip") == [0, 1 << 18]


@CUDARTS
def test_several_modules_and_kernels(nvcc, emulator_server, shared):
    program = build_cuda(nvcc, "modules_main.cu", "modules_lib.cu", shared_cudart=shared)
    job = run_job(emulator_server.socket, program)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("axpy_float", "axpy_double") == [1000, 1000]
    assert job.value("reduce") == job.value("expect")
    assert job.ints("second_module", "launches_seen") == [1000, 2]
    assert job.value("pitched") == "222"


@CUDARTS
def test_streams_events_pinned_memory_and_host_functions(nvcc, emulator_server, shared):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "streams_events.cu", shared_cudart=shared))
    assert job.returncode == 0, job.stdout + job.stderr
    # Host functions ran once each, in stream order: after the copy into pinned memory.
    assert job.ints("callbacks", "good_a", "good_b", "stream_callbacks") == [2, 4096, 4096, 10]
    assert job.ints("host_flags", "priority", "query_unrecorded", "query_done", "elapsed_ok", "stream_query") == \
        [0, -5, 0, 0, 1, 0]
    # cudart reads IS_MANAGED as 4 bytes: a 1-byte answer once made every pointer "managed" (3).
    assert job.value("pointer_types") == "1,2,0"
    assert job.value("pinned_host_pointer_ok") == "1"
    # The legacy default stream waited for the blocking stream's kernel.
    assert job.value("legacy_good") == "4096"
    # A wait on an event destroyed right after it still held the copy back.
    assert job.ints("destroyed_wait_good", "rounds") == [8, 8]
    assert "done" in job.stdout


@CUDARTS
def test_graphs_made_by_stream_capture(nvcc, emulator_server, shared):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "graph_capture.cu", shared_cudart=shared))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("capturing", "id_nonzero", "side_joined") == [1, 1, 1]
    # Nothing ran while capturing; each of 3 launches ran everything once, with the
    # pinned input of its round and the kernel parameter captured by value.
    assert job.ints("after_capture", "host_calls_before_launch") == [0, 0]
    assert job.ints("rounds_good", "host_calls") == [3, 3]
    assert job.value("graph_memory") == "0"      # no memory nodes: capture refuses stream-ordered allocation
    # cudaErrorStreamCaptureUnsupported (900), cudaErrorStreamCaptureInvalidated (901)
    assert job.ints("sync_in_capture", "launch_after", "end_invalidated", "graph_null", "legacy_capture") == \
        [900, 901, 901, 1, 900]
    assert job.value("after_ok") == "1"
    assert "not supported" not in job.stderr


def test_stream_capture_rules_as_cuda_enforces_them(nvcc, emulator_server):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "capture_errors.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    # cudaErrorStreamCaptureImplicit (906): asking about the legacy stream while a blocking
    # stream captures (the capture goes on), and a launch on it (which spoils the capture: 901)
    assert job.ints("legacy_query", "legacy_after") == [-906, 0]
    assert job.ints("legacy_launch", "implicit_end", "implicit_left") == [906, 901, 0]
    # cudaErrorIllegalState (401); cudaErrorStreamCaptureUnmatched (903) invalidates the capture
    assert job.ints("not_capturing_end", "unmatched", "after_unmatched") == [401, 903, 901]
    assert job.value("unmatched_left") == "0,0"
    # cudaErrorStreamCaptureUnjoined (904): the capture ends, both streams leave it
    assert job.value("unjoined") == "904" and job.value("unjoined_left") == "0,0"
    # only the first graph (1) and the joined fork's (2 + 3) ran
    assert job.value("sum") == "6"


@CUDARTS
def test_graphs_built_node_by_node(nvcc, emulator_server, shared):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "graph_nodes.cu", shared_cudart=shared))
    assert job.returncode == 0, job.stdout + job.stderr
    # memset, fill, two kernels side by side, their join, the copy, the host check
    assert job.ints("nodes", "roots", "join_deps", "first_dependents", "copy_type") == [7, 1, 2, 2, 1]
    # Two launches ran every node in an order that respects every edge (the join's edges
    # were added after the join itself); the host node saw the copy's bytes each time.
    assert job.ints("host_calls", "host_good", "d_last") == [2, 2, 3 * 4095 * 3 + 1]
    # New parameters in the instantiated graph only; the graph keeps the values copied at
    # cudaGraphAddKernelNode (3, though the variable was 1000 by the time of the launch).
    assert job.ints("updated_good", "graph_keeps_factor") == [3, 3]
    assert job.ints("child_c0", "child_c_last") == [42, 42]      # a node made by cudaGraphAddNode, then a child graph
    assert job.ints("cycle", "foreign_edge") == [1, 1]          # cudaErrorInvalidValue
    assert job.value("done") == "1"
    assert "not supported" not in job.stderr


def test_kernels_reach_pinned_memory_at_its_host_address(nvcc, emulator_server):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "mapped_pinned.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("attr_host_pointer") == "1"
    assert job.ints("mapped_same_pointer", "mapped_good", "pinned_good") == [1, 4096, 4096]
    assert job.ints("registered_sum", "plain_intact") == [2 * 4096, 1]
    assert job.value("done") == "1"


def test_driver_api(nvcc, emulator_server):
    ptx = build_device_code(nvcc, "driver_kernels.cu", "ptx")
    fatbin = build_device_code(nvcc, "driver_kernels.cu", "fatbin")
    job = run_job(emulator_server.socket, build_driver_c("driver_api.c"), "basics", ptx, fatbin)
    assert job.returncode == 0, job.stdout + job.stderr
    lines = job.stdout.splitlines()
    for how in ("params", "extra", "ex"):
        assert f"scale_{how} bias_size=4 good=300 of 300" in lines
    assert "param_offsets=0,8,32,40 sizes=1,24,8,2" in lines
    assert job.value("completion_event_with_timing") == str(CUDA_ERROR_INVALID_VALUE)
    assert job.ints("param_info_past_end", "missing_function", "launch_after_unload", "max_threads") == \
        [CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_INVALID_HANDLE, 1024]
    assert job.value("mixed") == f"{ord('t')},{ord('m')},42,-7,1234"
    # The emulator's limits: 2048 threads and 32 blocks per multiprocessor, 8 of them;
    # a PTX-only module reports no register count, so threads are the binding limit.
    assert job.ints("occupancy_128", "best_block", "min_grid") == [16, 1024, 16]
    # 16 blocks per multiprocessor, 8 multiprocessors in one GPC: 128 one-block or 64
    # two-block clusters at once; clusters up to the portable 8 blocks fit.
    assert job.ints("clusters_of_1", "clusters_of_2", "cluster_size") == [128, 64, 8]
    assert job.value("profiler") == "0,0"         # no profiler attached: both accepted
    # Refused when made, as the driver does, not at the next synchronization.
    assert job.ints("launch_too_many_threads", "launch_too_much_shared", "launch_zero_grid") == \
        [CUDA_ERROR_INVALID_VALUE] * 3
    assert job.value("pitched_good") == "100"
    assert job.value("memset16") == "aaaa,aaaa,1234,1234,1234,aaaa"
    assert job.ints("unified_equal", "range_ok", "memory_type", "host_pointer_attribute", "meminfo_ok",
                    "async_alloc_memset") == [1, 1, 2, CUDA_ERROR_INVALID_VALUE, 1, 1]
    assert job.value("sync_memops") == "0,1"
    assert job.value("set_attribute_bad") == f"{CUDA_ERROR_INVALID_VALUE},{CUDA_ERROR_INVALID_VALUE}"


def test_threads_share_the_connection(nvcc, emulator_server):
    # 4 host threads, 5 MiB copies in both directions (several arena chunks each);
    # three of them never had a context made current (each ends with cudaDeviceSynchronize).
    job = run_job(emulator_server.socket, build_cuda(nvcc, "threads.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("thread0", "thread1", "thread2", "thread3") == [6, 6, 6, 6]


def test_module_larger_than_a_request(emulator_server, tmp_path):
    # ~100 KiB of PTX: the client stages it through the upload arena in chunks.
    entries = "".join(f".visible .entry k{i}(.param .u64 p{i})\n{{ ret; }}\n" for i in range(2500))
    path = tmp_path / "big.ptx"
    path.write_text(f".version 8.0\n.target sm_80\n.address_size 64\n{entries}")
    job = run_job(emulator_server.socket, build_driver_c("driver_api.c"), "load", path, "k2499")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("load_rc", "resolve_rc") == [0, 0]
    missing = run_job(emulator_server.socket, build_driver_c("driver_api.c"), "load", tmp_path / "none.ptx", "k")
    assert missing.value("load_rc") == "301"      # CUDA_ERROR_FILE_NOT_FOUND
