"""The JIT linker's static libraries and permissive prototypes under tally-run:
tests/cuda/programs/link_library.c links the kernels' PTX with an ar archive of two
nvcc -rdc host objects (cuLinkAddFile, CU_JIT_INPUT_LIBRARY): the member that
defines what the kernels call is linked, the other is not; the kernels declare
`record` as returning a 64-bit value where the library defines it void (numba's
C-ABI declarations), which links as nvJitLink links it; the kernel then runs with
the library's code. Also libcudadevrt.a from the toolkit, whose member's PTX is for
a newer architecture than the device, linked for the cooperative-groups functions."""
from __future__ import annotations

import subprocess

from e2e_helpers import CUDA_HOME, PROGRAMS, build_device_code, build_driver_c, emulator_server, run_job  # noqa: F401

from tally.server.client.linker import INPUT_LIBRARY, INPUT_PTX, LinkState

CUDA_ERROR_INVALID_IMAGE = 200


def _library(nvcc: str, tmp_path) -> str:
    objects = []
    for name in ("library_functions.cu", "library_unused.cu"):
        out = tmp_path / name.replace(".cu", ".o")
        subprocess.run([nvcc, "-rdc=true", "-c", "-gencode", "arch=compute_90,code=compute_90",
                        str(PROGRAMS / name), "-o", str(out)], check=True, capture_output=True)
        objects.append(str(out))
    archive = tmp_path / "libtest.a"
    subprocess.run(["ar", "rcs", str(archive), *objects], check=True, capture_output=True)
    return str(archive)


def test_static_library_members_link_on_demand(nvcc, emulator_server, tmp_path):
    kernels = build_device_code(nvcc, "library_kernels.cu", "ptx", ("-rdc=true", "-arch=sm_90"))
    library = _library(nvcc, tmp_path)
    job = run_job(emulator_server.socket, build_driver_c("link_library.c"), kernels, library)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("not_archive", "complete", "wrong", "out10") == [CUDA_ERROR_INVALID_IMAGE, 0, 0, 31]
    info = [line[len("info: "):] for line in job.stdout.splitlines() if line.startswith("info: ")]
    assert f"{library}(library_functions.o): linked for record, scale" in info
    assert f"{library}(library_unused.o): not linked (nothing refers to what it defines)" in info
    assert any(line.startswith("the declaration of 'record' in ") and "adapter" in line for line in info), info


def test_libcudadevrt_links_for_cooperative_groups(tmp_path):
    # what numba links when a kernel synchronizes its grid: its calls and libcudadevrt.a
    caller = """.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b64 func_retval0) cudaCGGetIntrinsicHandle(.param .b32 scope);
.extern .func (.param .b32 func_retval0) cudaCGSynchronize(.param .b64 handle, .param .b32 flags);
.visible .entry sync_grid(.param .u64 out)
{
.reg .b64 %rd<3>;
.reg .b32 %r<2>;
{
.param .b32 param0;
st.param.b32 [param0], 1;
.param .b64 retval0;
call.uni (retval0), cudaCGGetIntrinsicHandle, (param0);
ld.param.b64 %rd1, [retval0];
}
{
.param .b64 param0;
st.param.b64 [param0], %rd1;
.param .b32 param1;
st.param.b32 [param1], 0;
.param .b32 retval0;
call.uni (retval0), cudaCGSynchronize, (param0, param1);
ld.param.b32 %r1, [retval0];
}
ld.param.u64 %rd2, [out];
st.global.u32 [%rd2], %r1;
ret;
}
"""
    link = LinkState()
    link.add("sync_grid.ptx", INPUT_PTX, caller.encode(), (9, 0))
    link.add("libcudadevrt.a", INPUT_LIBRARY, (CUDA_HOME / "lib64" / "libcudadevrt.a").read_bytes(), (9, 0))
    result = link.complete(verbose=False)
    assert result.status == 0, result.error_log
    text = result.image.rstrip(b"\0").decode()
    assert ".target sm_90\n" in text
    assert "cudaCGSynchronize" in text and "__cuda_syscall_CGS_sync" in text
    assert "libcudadevrt.a(cuda_device_runtime.o): linked for cudaCGGetIntrinsicHandle, cudaCGSynchronize" \
        in result.info_log
    (tmp_path / "linked.ptx").write_text(text)
    ptxas = subprocess.run([str(CUDA_HOME / "bin" / "ptxas"), "-arch=sm_90", str(tmp_path / "linked.ptx"), "-o",
                            str(tmp_path / "linked.cubin")], capture_output=True, text=True, check=False)
    assert ptxas.returncode == 0, ptxas.stderr
