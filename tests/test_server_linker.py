"""What each kind of linker input contributes on the server (tally/server/client/
linker.py): PTX as is, a fatbin's PTX closest to the device, and a clear refusal
for inputs tally cannot link."""
from __future__ import annotations

import subprocess

import pytest
from e2e_helpers import build_device_code

from ptx_passes.linking import link_inputs, read_link_input
from tally.protocol.errors import (
    CUDA_ERROR_INVALID_IMAGE,
    CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUDA_ERROR_NOT_SUPPORTED,
    DeviceError,
)
from tally.server.client.linker import (
    INPUT_CUBIN,
    INPUT_FATBINARY,
    INPUT_LIBRARY,
    LinkState,
    INPUT_NVVM,
    INPUT_PTX,
    NothingForThisDevice,
    input_ptx,
    kind_by_content,
)
from tally.jit import records

CC = (9, 0)


def test_fatbin_input_contributes_its_ptx(nvcc):
    functions = build_device_code(nvcc, "link_functions.cu", "fatbin", ("-rdc=true", "-arch=sm_80"))
    kernels = build_device_code(nvcc, "link_kernels.cu", "ptx", ("-rdc=true",))
    ptx = input_ptx(INPUT_FATBINARY, functions.read_bytes(), "functions.fatbin", CC)
    functions_input = read_link_input("functions.fatbin", ptx)
    assert functions_input.module.targets == ("sm_80",)
    assert functions_input.module.function("polynomial").body is not None
    linked = link_inputs([read_link_input("kernels.ptx", kernels.read_text()), functions_input])
    assert "polynomial" in linked.text and ".extern" not in linked.text


def test_inputs_without_ptx_are_refused_with_the_reason(nvcc):
    cubin_only = build_device_code(nvcc, "link_functions.cu", "fatbin",
                                   ("-rdc=true", "-gencode", "arch=compute_80,code=sm_80"))
    with pytest.raises(DeviceError) as e:
        input_ptx(INPUT_FATBINARY, cubin_only.read_bytes(), "functions.fatbin", CC)
    assert e.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU
    assert "functions.fatbin: holds no PTX (cubins: sm_80); tally's linker links PTX" in e.value.message


@pytest.mark.parametrize("kind, data, code, message", [
    (INPUT_PTX, b"\xff\xfe.version", CUDA_ERROR_INVALID_PTX, "x: PTX input is not UTF-8 text"),
    (INPUT_CUBIN, b"not an image", CUDA_ERROR_INVALID_IMAGE, "x: input not understood"),
    (INPUT_NVVM, b"BC", CUDA_ERROR_NOT_SUPPORTED, "x: LTO IR (CU_JIT_INPUT_NVVM) is not linked by tally"),
    (42, b"x", CUDA_ERROR_INVALID_VALUE, "x: unknown CUjitInputType 42"),
])
def test_bad_inputs(kind, data, code, message):
    with pytest.raises(DeviceError) as e:
        input_ptx(kind, data, "x", CC)
    assert e.value.code == code and e.value.message.startswith(message)


@pytest.mark.parametrize("data, message", [
    (b"not an archive", "x: not a static library (an ar archive starts with '!<arch>')"),
    (b"!<arch>\nshort header", "x: the static library does not read"),
])
def test_bad_static_libraries_are_refused_at_add(data, message):
    # A static library is read member by member when it is added (LinkState.add), not
    # through input_ptx: a file that is no ar archive, or a truncated one, is refused there.
    with pytest.raises(DeviceError) as e:
        LinkState().add("x", INPUT_LIBRARY, data, CC)
    assert e.value.code == CUDA_ERROR_INVALID_IMAGE and e.value.message.startswith(message)


def test_an_empty_static_library_links_nothing_and_says_so():
    state = LinkState()
    state.add("x", INPUT_LIBRARY, b"!<arch>\n", CC)
    assert state.inputs == [] and state.notes == ["x: no member holds PTX tally can link"]


def test_ptx_input_loses_its_terminating_nuls():
    assert input_ptx(INPUT_PTX, b".version 8.0\n\0\0", "x", CC) == ".version 8.0\n"


def test_a_fatbin_with_only_sass_for_the_device_is_left_out_not_its_newer_ptx_used(nvcc):
    # The shape of CUDA 13's device runtime (linked into every -rdc program): cubins up to
    # sm_90 and beyond, PTX only for a newer architecture. Its PTX must never be chosen.
    fatbin = build_device_code(nvcc, "link_functions.cu", "fatbin",
                               ("-rdc=true", "-gencode", "arch=compute_90,code=sm_90",
                                "-gencode", "arch=compute_120,code=compute_120"))
    with pytest.raises(NothingForThisDevice, match="SASS only.*compute_120, newer than the device"):
        input_ptx(INPUT_FATBINARY, fatbin.read_bytes(), "devrt-like.fatbin", CC)
    ptx = input_ptx(INPUT_FATBINARY, fatbin.read_bytes(), "devrt-like.fatbin", (12, 0))
    assert read_link_input("x", ptx).module.targets == ("sm_120",)   # a device that new takes it


@pytest.fixture(scope="module")
def relocatable_cubin(nvcc, ptxas, tmp_path_factory):
    """(a relocatable sm_80 cubin of link_functions.cu, the PTX ptxas made it from)."""
    ptx = build_device_code(nvcc, "link_functions.cu", "ptx", ("-rdc=true", "-arch=compute_80"))
    out = tmp_path_factory.mktemp("reloc") / "functions.cubin"
    subprocess.run([ptxas, "-c", "-arch=sm_80", str(ptx), "-o", str(out)], check=True)
    return out.read_bytes(), ptx.read_text()


def test_a_cubin_or_fatbin_passed_as_ptx_is_taken_by_its_content(relocatable_cubin, nvcc):
    """The driver takes an input by its bytes (CuPy passes its NVRTC -dc cubins as
    CU_JIT_INPUT_PTX); so does tally."""
    cubin, _ = relocatable_cubin
    assert kind_by_content(INPUT_PTX, cubin) == INPUT_CUBIN
    fatbin = build_device_code(nvcc, "link_functions.cu", "fatbin", ("-rdc=true", "-arch=sm_80")).read_bytes()
    assert kind_by_content(INPUT_PTX, fatbin) == INPUT_FATBINARY
    assert kind_by_content(INPUT_PTX, b".version 8.0") == INPUT_PTX
    link = LinkState()
    with pytest.raises(DeviceError) as e:                # read as a cubin: it has no PTX of its own
        link.add("cupy.ptx", INPUT_PTX, cubin, CC)
    assert e.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU and "cupy.ptx: holds no PTX (cubins: sm_80)" in e.value.message


def test_a_cubin_input_links_from_its_jit_capture_record(relocatable_cubin, nvcc):
    cubin, ptx = relocatable_cubin
    kernels = build_device_code(nvcc, "link_kernels.cu", "ptx", ("-rdc=true",)).read_text()
    link = LinkState()
    link.add("kernels.ptx", INPUT_PTX, kernels.encode(), CC)
    link.add("cupy.ptx", INPUT_PTX, cubin, CC, records.encode(cubin, ptx, "nvrtc"))
    result = link.complete(verbose=False)
    assert result.status == 0, result.error_log
    assert b"polynomial" in result.image and b".extern" not in result.image
    # a record of another cubin is not used, and the info log says why
    other = LinkState()
    with pytest.raises(DeviceError) as e:
        other.add("cupy.ptx", INPUT_CUBIN, cubin, CC, records.encode(cubin + b"\0", ptx, "nvrtc"))
    assert "holds no PTX" in e.value.message
    assert "a JIT-capture record came with the cubin but was not used: the record was made for another cubin" \
        in e.value.message
