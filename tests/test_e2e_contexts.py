"""Contexts through the driver API under tally-run (tests/cuda/programs/contexts.c, a
CUDA 13 program: cuCtxCreate is cuCtxCreate_v4): created contexts are current, keep
their own settings, run their own modules, and cuCtxDestroy releases what they made."""
from __future__ import annotations

from e2e_helpers import build_device_code, build_driver_c, emulator_server, run_job  # noqa: F401

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY = 224
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
CUDA_ERROR_NOT_SUPPORTED = 801
CU_CTX_SCHED_SPIN, CU_CTX_SCHED_YIELD, CU_CTX_SCHED_BLOCKING_SYNC = 1, 2, 4


def test_created_contexts(nvcc, emulator_server):
    ptx = build_device_code(nvcc, "driver_kernels.cu", "ptx")
    job = run_job(emulator_server.socket, build_driver_c("contexts.c"), ptx)
    assert job.returncode == 0 and job.value("done") == "1", job.stdout + job.stderr
    # A new context is current and reports its flags, API version and its own id.
    assert job.ints("a_current", "a_flags", "a_api", "ids_differ") == [1, CU_CTX_SCHED_YIELD, 3020, 1]
    assert job.ints("a_flags_set") == [CU_CTX_SCHED_SPIN]
    # Limits are per context; push/pop restore the previous one.
    assert job.ints("stack_a", "stack_primary", "popped_primary", "current_a_again") == [4096, 1024, 1, 1]
    assert job.ints("b_sm_count") == [2]
    # Each context ran `iota` from its own module: 0..63 and 1000..1063.
    assert job.ints("sum_a", "sum_b") == [sum(range(64)), sum(range(1000, 1064))]
    # Memory and streams belong to the context they were made in.
    assert job.ints("owner_a", "owner_b", "stream_ctx_b") == [1, 1, 1]
    # Destroying a freed its memory (the server's free memory grew), unloaded its module,
    # and left the other context's untouched.
    assert job.ints("after_destroy_current_null", "freed") == [1, 1]
    assert job.ints("a_module", "a_memory") == [CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE]
    assert job.ints("b_still") == [sum(range(1000, 1064))]
    assert job.ints("push_destroyed", "destroy_again", "destroy_primary", "destroy_null") == [
        CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE]
    assert job.ints("api_destroyed", "id_destroyed") == [CUDA_ERROR_INVALID_CONTEXT] * 2
    # Current in another thread when destroyed: still current there, and unusable.
    assert job.ints("other_get_current", "other_is_shared") == [0, 1]
    assert job.ints("other_sync", "other_alloc") == [CUDA_ERROR_CONTEXT_IS_DESTROYED] * 2
    assert job.ints("cig", "bad_affinity", "bad_flags") == [
        CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, CUDA_ERROR_INVALID_VALUE]
    assert "tally: cuCtxCreate: contexts in CUDA-in-Graphics mode (cigParams) are not supported" in job.stderr
    # cuCtxCreate_v2 and _v3, fetched by ABI version.
    assert job.ints("v2_flags", "v3_sm_count_is_device") == [CU_CTX_SCHED_BLOCKING_SYNC, 1]
