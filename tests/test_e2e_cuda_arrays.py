"""CUDA arrays as tally models them: linear device memory behind a handle (cuArrayCreate,
cuArray3DCreate, their descriptors, cuArrayDestroy) with copies in and out by every form,
charged to the job's quota like any allocation (textures and surfaces over them: test_e2e_textures.py)."""
from __future__ import annotations

from e2e_helpers import build_driver_c, emulator_server, run_job  # noqa: F401

INVALID_VALUE, INVALID_HANDLE, NOT_SUPPORTED = 1, 400, 801


def test_arrays_hold_what_is_copied_in(emulator_server):
    job = run_job(emulator_server.socket, build_driver_c("cuda_arrays.c"))
    assert job.returncode == 0, job.stdout + job.stderr
    # no descriptor, three channels (1, 2 or 4 only), a video format (read by texture units only)
    assert job.value("refused") == f"{INVALID_VALUE},{INVALID_VALUE},{INVALID_VALUE}"
    assert job.value("descriptor") == "64,8,32,1"
    assert job.value("linear_round_trip") == "1"
    assert job.value("past_the_end") == str(INVALID_VALUE)
    assert "window_good=64 of 64" in job.stdout and "twin_good=512 of 512" in job.stdout
    assert job.value("descriptor3d") == "16,4,3,2"
    assert job.value("flat_descriptor_of_3d") == str(INVALID_VALUE)
    assert f"volume_good={3 * 4 * 64} of {3 * 4 * 64}" in job.stdout
    assert job.value("destroy_twice") == str(INVALID_HANDLE)
    assert job.value("copy_after_destroy") == str(INVALID_VALUE)
    assert job.value("memory_back") == "1"      # every array's memory went back to the server


def test_an_array_past_the_quota_is_refused(emulator_server):
    job = run_job(emulator_server.socket, build_driver_c("cuda_arrays.c"), quota="1K")
    assert job.returncode == 1 and "cuArrayCreate" in job.stdout, job.stdout + job.stderr
