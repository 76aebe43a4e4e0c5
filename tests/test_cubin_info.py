"""ptx_passes.cubin_info against what ptxas reports (and, on a GPU, what the driver reports)."""
from __future__ import annotations

import ctypes
import hashlib
import re
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptx_passes.cubin_info import CubinError, kernel_info, kernel_names, kernel_param_total, kernel_params
from binary_damage import damaged_copy

SOURCES = Path(__file__).parent / "cuda" / "fatbin"
KP = "_Z2kpc5Mixed6float4s4FivePKib"
KP_PARAMS = [(0, 1), (8, 24), (32, 16), (48, 2), (64, 32), (96, 8), (104, 1)]


@pytest.fixture(scope="session")
def compile_cubin(nvcc, tmp_path_factory):
    """(cubin bytes, ptxas -v report) for a source and arch, cached for the session by content hash."""
    cache = tmp_path_factory.mktemp("nvcc-cubin")

    def run(source: Path, arch: str) -> tuple[bytes, str]:
        key = hashlib.sha256(source.read_bytes() + arch.encode()).hexdigest()[:16]
        out = cache / f"{source.stem}-{arch}-{key}.cubin"
        log = out.with_suffix(".log")
        if not out.exists():
            command = [nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", str(source), "-o", str(out)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.fail(f"{' '.join(command)} failed:\n{done.stderr}")
            log.write_text(done.stdout + done.stderr)
        return out.read_bytes(), log.read_text()

    return run


@pytest.fixture(scope="session", params=["sm_80", "sm_90"])
def kernels(request, compile_cubin) -> tuple[str, bytes, str]:
    cubin, report = compile_cubin(SOURCES / "kernels.cu", request.param)
    return request.param, cubin, report


def ptxas_report(report: str) -> dict[str, dict[str, int]]:
    """Per kernel: registers, barriers, smem, stack as `ptxas -v` prints them."""
    facts: dict[str, dict[str, int]] = {}
    for block in report.split("Compiling entry function '")[1:]:
        name = block.split("'", 1)[0]
        used = re.search(r"Used (\d+) registers, used (\d+) barriers(?:.*?, (\d+) bytes smem)?", block)
        stack = re.search(r"(\d+) bytes stack frame", block)
        assert used and stack, block
        facts[name] = {"registers": int(used[1]), "barriers": int(used[2]),
                       "static_shared": int(used[3] or 0), "frame_size": int(stack[1])}
    return facts


def test_design_kernel_parameter_layout(kernels):
    _, cubin, _ = kernels
    assert kernel_params(cubin)[KP] == KP_PARAMS
    assert kernel_param_total(cubin, KP) == 105
    info = kernel_info(cubin)
    assert info["_Z13static_sharedPfi"].params == [(0, 8), (8, 4)]
    assert (info["_Z9no_paramsv"].params, info["_Z9no_paramsv"].param_total) == ([], 0)


def test_kernel_facts_match_ptxas(kernels):
    arch, cubin, report = kernels
    expected = ptxas_report(report)
    info = kernel_info(cubin)
    assert sorted(kernel_names(cubin)) == sorted(expected)
    assert len(expected) == 9
    for name, facts in expected.items():
        got = info[name]
        assert {key: getattr(got, key) for key in facts} == facts, (arch, name)
    # Values pinned so a silent change in the source or toolchain shows up here.
    assert info["_Z13static_sharedPfi"].static_shared == 1024
    assert info["_Z11stack_framePKiPf"].frame_size == 256
    assert info["_Z14many_registersPKfPfi"].registers > 40 >= info["_Z16capped_registersPKfPfi"].registers


def test_launch_bounds_register_caps_and_cbank(kernels):
    arch, cubin, _ = kernels
    info = kernel_info(cubin)
    assert info["_Z7boundedPf"].max_threads == (128, 1, 1)
    assert info["_Z18bounded_min_blocksPf"].max_threads == (256, 1, 1)
    assert info["_Z18bounded_min_blocksPf"].max_registers == 128  # 65536 registers / (256 threads x 2 blocks)
    assert info["_Z16capped_registersPKfPfi"].max_registers == 32
    assert info[KP].max_threads is None and info[KP].max_registers is None
    assert info[KP].param_cbank_offset == {"sm_80": 0x160, "sm_90": 0x210}[arch]
    assert info["_Z9grid_syncPi"].uses_grid_sync is True
    assert not any(i.uses_grid_sync for n, i in info.items() if n != "_Z9grid_syncPi")
    assert all(i.cluster_dims is None and i.required_threads is None for i in info.values())


def test_clusters_and_reqntid(compile_cubin, nvcc, ptxas, tmp_path):
    cubin, _ = compile_cubin(SOURCES / "cluster.cu", "sm_90")
    assert kernel_info(cubin)["_Z9clusteredPi"].cluster_dims == (2, 1, 1)
    # No CUDA C++ attribute emits .reqntid; set it in nvcc's PTX and assemble that.
    ptx = tmp_path / "bounded.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=sm_90", str(SOURCES / "kernels.cu"), "-o", str(ptx)], check=True)
    text = ptx.read_text()
    assert ".maxntid 128, 1, 1" in text
    ptx.write_text(text.replace(".maxntid 128, 1, 1", ".reqntid 32, 2, 1"))
    out = tmp_path / "bounded.cubin"
    subprocess.run([ptxas, "-arch=sm_90", str(ptx), "-o", str(out)], check=True)
    bounded = kernel_info(out.read_bytes())["_Z7boundedPf"]
    assert (bounded.required_threads, bounded.max_threads) == ((32, 2, 1), None)


# --- errors -------------------------------------------------------------------------------------

def test_not_a_cubin(compile_cubin):
    with pytest.raises(CubinError, match="not an ELF image"):
        kernel_info(b"\x50\xed\x55\xba" + bytes(60))
    cubin, _ = compile_cubin(SOURCES / "kernels.cu", "sm_80")
    host_machine = bytearray(cubin)
    struct.pack_into("<H", host_machine, 18, 62)  # EM_X86_64
    with pytest.raises(CubinError, match="not a cubin: ELF machine 62"):
        kernel_info(bytes(host_machine))
    with pytest.raises(CubinError, match=r"no kernel named 'nope'.*_Z7boundedPf"):
        kernel_param_total(cubin, "nope")
    with pytest.raises(CubinError, match="too short"):
        kernel_info(cubin[:40])


def _nv_info_section(cubin: bytes, name: str) -> tuple[int, int]:
    """(file offset, size) of a section, read from the raw section headers."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    strtab_off = struct.unpack_from("<Q", cubin, shoff + shstrndx * shentsize + 0x18)[0]
    for i in range(shnum):
        header = shoff + i * shentsize
        name_at = strtab_off + struct.unpack_from("<I", cubin, header)[0]
        if cubin[name_at:cubin.index(b"\0", name_at)].decode() == name:
            return struct.unpack_from("<QQ", cubin, header + 0x18)
    raise AssertionError(name)


def test_damaged_nv_info_records(compile_cubin):
    cubin, _ = compile_cubin(SOURCES / "kernels.cu", "sm_80")
    offset, size = _nv_info_section(cubin, f".nv.info.{KP}")
    first_sval = next(at for at in range(offset, offset + size, 4) if cubin[at] == 0x04)
    too_long = bytearray(cubin)
    struct.pack_into("<H", too_long, first_sval + 2, 0x7FFF)
    with pytest.raises(CubinError, match="claims 32767 bytes of data"):
        kernel_info(bytes(too_long))
    bad_format = bytearray(cubin)
    bad_format[offset] = 0x09
    with pytest.raises(CubinError, match="unknown EIATTR format 0x9"):
        kernel_info(bytes(bad_format))


@pytest.fixture(scope="session")
def cubin_samples(compile_cubin) -> list[tuple[bytes, list[int]]]:
    out = []
    for arch in ("sm_80", "sm_90"):
        cubin, _ = compile_cubin(SOURCES / "kernels.cu", arch)
        hot = [0x28, 0x3A, struct.unpack_from("<Q", cubin, 0x28)[0]]
        hot += [_nv_info_section(cubin, name)[0] for name in (".nv.info", f".nv.info.{KP}", ".symtab")]
        out.append((cubin, hot))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_cubins_raise_only_cubin_error(cubin_samples, data):
    blob, hot = data.draw(st.sampled_from(cubin_samples))
    damaged = damaged_copy(data, blob, hot, span=160)
    try:
        info = kernel_info(damaged)
    except CubinError as exc:
        assert str(exc)
        return
    for kernel in info.values():
        assert all(size >= 0 for _, size in kernel.params)


# --- the driver's view (needs a GPU) ------------------------------------------------------------

CU_FUNC_ATTRIBUTE = {"max_threads": 0, "static_shared": 1, "frame_size": 3, "registers": 4}


@pytest.mark.gpu
def test_driver_agrees(compile_cubin):
    from tally.backends.registry import real_driver_present
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(status: int, what: str) -> None:
        assert status == 0, f"{what} returned CUresult {status}"

    check(cuda.cuInit(0), "cuInit")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    major, minor = ctypes.c_int(), ctypes.c_int()
    check(cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device), "compute capability major")
    check(cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device), "compute capability minor")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    cubin, _ = compile_cubin(SOURCES / "kernels.cu", f"sm_{major.value}{minor.value}")
    module = ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
    for name, info in kernel_info(cubin).items():
        function = ctypes.c_void_p()
        check(cuda.cuModuleGetFunction(ctypes.byref(function), module, name.encode()), name)
        for field, attribute in CU_FUNC_ATTRIBUTE.items():
            value = ctypes.c_int()
            check(cuda.cuFuncGetAttribute(ctypes.byref(value), attribute, function), f"{name} {field}")
            ours = getattr(info, field)
            if field == "max_threads":
                if ours is None:
                    continue  # the driver answers a device/register-dependent limit
                ours = ours[0] * ours[1] * ours[2]
            assert value.value == ours, (name, field)
        params = []
        for index in range(len(info.params) + 1):
            offset, size = ctypes.c_size_t(), ctypes.c_size_t()
            status = cuda.cuFuncGetParamInfo(function, index, ctypes.byref(offset), ctypes.byref(size))
            if status != 0:
                break
            params.append((offset.value, size.value))
        assert params == info.params, name
    check(cuda.cuModuleUnload(module), "cuModuleUnload")
    check(cuda.cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease")
