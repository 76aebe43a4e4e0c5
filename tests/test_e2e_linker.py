"""The JIT linker under tally-run: cuLink* through the driver API
(tests/cuda/programs/linker.c: two relocatable PTX inputs, logs, errors) and an
`nvcc -rdc=true` program whose device code is split over two files (cudart hands
the driver its relocatable device code, which tally links when it loads)."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, build_device_code, build_driver_c, emulator_server, run_job  # noqa: F401

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_FILE_NOT_FOUND = 301
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_SUPPORTED = 801


def test_driver_api_linker(nvcc, emulator_server):
    kernels = build_device_code(nvcc, "link_kernels.cu", "ptx", ("-rdc=true",))
    functions = build_device_code(nvcc, "link_functions.cu", "ptx", ("-rdc=true",))
    job = run_job(emulator_server.socket, build_driver_c("linker.c"), kernels, functions)
    assert job.returncode == 0 and job.value("done") == "1", job.stdout + job.stderr
    info = [line[len("info: "):] for line in job.stdout.splitlines() if line.startswith("info: ")]
    errors = [line[len("error: "):] for line in job.stdout.splitlines() if line.startswith("error: ")]
    # The image is NUL-terminated PTX; the info log (verbose) says what was resolved where.
    assert job.ints("image_is_ptx", "image_terminated", "clean_error_size", "wall_time_set") == [1, 1, 0, 1]
    assert job.ints("info_size")[0] == len("\n".join(info)) + 1
    assert info[0].startswith(f"linked 2 PTX input(s) (kernels.ptx, {functions}): .version ")
    assert f"'polynomial' used in kernels.ptx resolved to {functions}" in info
    assert f"'offset' used in kernels.ptx resolved to {functions}" in info
    # The kernel ran the other input's code: 3i^2 + 2i + 1 + offset (7).
    assert job.ints("out5", "wrong", "offset_size") == [3 * 25 + 10 + 1 + 7, 0, 4]
    assert job.ints("destroyed_again", "complete_destroyed") == [CUDA_ERROR_INVALID_HANDLE] * 2
    # An unresolved symbol fails cuLinkComplete; the error log names it and its user.
    unresolved = [
        "undefined reference to 'polynomial' in kernels.ptx: no input defines this function "
        "(add the PTX that defines it with cuLinkAddData)",
        "undefined reference to 'offset' in kernels.ptx: no input defines this variable "
        "(add the PTX that defines it with cuLinkAddData)"]
    assert job.ints("unresolved")[0] == CUDA_ERROR_INVALID_IMAGE
    assert job.ints("error_size", "error_len") == [len("\n".join(unresolved)) + 1, len("\n".join(unresolved))]
    assert errors[:2] == unresolved
    # Bad inputs fail cuLinkAddData, each with a reason in the error log.
    assert job.ints("bad_ptx", "no_file", "refused_option", "bad_type", "library") == [
        CUDA_ERROR_INVALID_PTX, CUDA_ERROR_FILE_NOT_FOUND, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_INVALID_IMAGE]
    assert errors[2].startswith("bad.ptx: not valid PTX: bad.ptx:4:")
    assert errors[3].startswith("lib.a: not a static library (an ar archive starts with '!<arch>')")
    # A log buffer too small for the message: filled to its size, NUL-terminated.
    assert job.ints("small_rc", "small_len", "small_filled") == [CUDA_ERROR_INVALID_IMAGE, 15, 16]
    assert job.ints("bad_option") == [CUDA_ERROR_INVALID_VALUE]


@pytest.mark.parametrize("arch", [(), ("-gencode", "arch=compute_80,code=compute_80")],
                         ids=["default-arch", "ptx-only"])
def test_rdc_program_with_device_code_in_two_files(nvcc, emulator_server, arch):
    # Default arch: nvlink's image holds an sm_75 cubin the emulator cannot run; PTX
    # only: nvlink's image is empty. Either way the relocatable PTX is linked at load.
    program = build_cuda(nvcc, "rdc_main.cu", "rdc_device.cu", flags=("-rdc=true", *arch))
    job = run_job(emulator_server.socket, program)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("wrong", "calls") == [0, 300]
    assert job.value("out7") == "15"
