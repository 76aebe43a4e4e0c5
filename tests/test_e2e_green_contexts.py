"""Green contexts a job makes itself (tests/cuda/programs/green_contexts.cu) under
tally-run on the emulator, which reports an H100's partition rules (at least 8
SMs, multiples of 8) and here 32 SMs: the job splits the SMs it may use, makes a
green context on an 8-SM group, and a kernel whose blocks record %smid runs on at
most those 8 SMs on the green context's streams, on any of the 32 elsewhere.
(%smid names the emulator worker thread that ran the block.)"""
from __future__ import annotations

import pytest

from e2e_helpers import build_cuda, emulator_server_process, run_job

from tally import paths

EMULATED_SMS = 32
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
CUDA_ERROR_INVALID_RESOURCE_TYPE = 914
CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915


def build_green_contexts(nvcc):
    return build_cuda(nvcc, "green_contexts.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))


@pytest.fixture(scope="module")
def sm32_server():
    server = emulator_server_process("--emulate-sms", str(EMULATED_SMS))
    yield server
    server.stop()


def check_green_context_job(job, device_sms: int) -> None:
    """What green_contexts.cu printed, for a job that may use `device_sms` SMs of a
    device whose partitions are at least 8 SMs in multiples of 8."""
    assert job.returncode == 0 and job.value("done") == "1", job.stdout + job.stderr
    assert job.ints("device_sms", "min_partition", "alignment") == [device_sms, 8, 8]
    assert job.ints("groups_possible", "groups_made", "group_sms", "remaining_sms") == [
        device_sms // 8, 2, 8, device_sms - 16]
    assert job.ints("green_sms", "stream_in_green", "null_in_green", "made_in_green") == [8, 1, 1, 1]
    # Every block of a kernel on the green context's streams ran on one of its 8 SMs.
    # (%smid is the emulator worker that ran the block: how many of the allowed workers
    # get blocks depends on the host's scheduling, never more than allowed.)
    for launch in ("green_stream", "green_null"):
        distinct, highest = job.ints(f"{launch}_distinct_sms", f"{launch}_max_smid")
        assert 1 <= distinct <= 8 and highest <= 7, launch
    assert 1 <= job.ints("whole_distinct_sms")[0] <= device_sms
    assert job.ints("current_green_id_matches", "green_event_done", "current_affinity_sms") == [1, 1, 8]


def test_a_green_context_keeps_its_kernels_to_its_sms(nvcc, sm32_server):
    job = run_job(sm32_server.socket, build_green_contexts(nvcc), 8, timeout=300, priority="high")
    check_green_context_job(job, EMULATED_SMS)
    assert job.ints("split_larger_than_device", "split_a_group_again", "split_unknown_flags") == [
        CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, CUDA_ERROR_INVALID_VALUE]
    assert job.ints("desc_of_two_splits", "green_unknown_flags", "green_stream_blocking") == [
        CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE]
    assert job.ints("resource_type_not_sm") == [CUDA_ERROR_INVALID_RESOURCE_TYPE]
    assert job.ints("destroyed_stream_sync", "destroyed_again") == [CUDA_ERROR_CONTEXT_IS_DESTROYED] * 2
    # The refusals that have a reason say it on the job's stderr.
    assert "a group of a split cannot be split again" in job.stderr
    assert "flags must be CU_STREAM_NON_BLOCKING" in job.stderr
    # The server and other jobs carried on.
    again = run_job(sm32_server.socket, build_green_contexts(nvcc), 16, timeout=300, priority="high")
    assert again.returncode == 0 and again.ints("group_sms") == [16], again.stdout
    assert 1 <= again.ints("green_stream_distinct_sms")[0] <= 16 and again.ints("green_stream_max_smid")[0] <= 15


def test_minimum_count_is_rounded_to_the_partition_rules(nvcc, sm32_server):
    # At least 9 SMs: groups of 16 (the next multiple of 8), two of them in 32.
    job = run_job(sm32_server.socket, build_green_contexts(nvcc), 9, timeout=300, priority="high")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("groups_possible", "group_sms", "remaining_sms") == [2, 16, 0]
    green, null, whole = job.ints("green_stream_distinct_sms", "green_null_distinct_sms", "whole_distinct_sms")
    assert 1 <= green <= 16 and 1 <= null <= 16 and 1 <= whole <= 32
    assert max(job.ints("green_stream_max_smid", "green_null_max_smid")) <= 15
