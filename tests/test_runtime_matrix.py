"""Every CUDA runtime release on the package index works under tally, not only the
toolkit's: CUDA's minor-version compatibility lets a newer runtime run on the
driver a job has, and each newer runtime has asked a driver for something new
(cudart 13.5: the tools context export table, docs/export-tables.md). The newest
build of each release from 12.4 on is downloaded once into a cache and loaded by a
probe (tests/cuda/programs/runtime_probe.cu) under tally-run, which also makes
calls needing a context from a worker thread that never called cudaSetDevice; the
13.x ones also run a kernel, from the main thread and from such a worker thread
(tests/cuda/programs/runtime_kernel.cu). Downloads need the package index; without it the test skips and says
so (a skip is not a pass)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from e2e_helpers import build_cuda, emulator_server_process, run_job

CACHE = Path(os.environ.get("TALLY_RUNTIME_CACHE", Path.home() / ".cache" / "tally" / "cuda-runtimes"))
# (package, version, the library in its wheel): the newest build of each release
RUNTIMES = [
    ("nvidia-cuda-runtime-cu12", "12.4.127", "libcudart.so.12"),
    ("nvidia-cuda-runtime-cu12", "12.5.82", "libcudart.so.12"),
    ("nvidia-cuda-runtime-cu12", "12.6.77", "libcudart.so.12"),
    ("nvidia-cuda-runtime-cu12", "12.8.90", "libcudart.so.12"),
    ("nvidia-cuda-runtime-cu12", "12.9.79", "libcudart.so.12"),
    ("nvidia-cuda-runtime", "13.0.96", "libcudart.so.13"),
    ("nvidia-cuda-runtime", "13.1.80", "libcudart.so.13"),
    ("nvidia-cuda-runtime", "13.2.86", "libcudart.so.13"),
    ("nvidia-cuda-runtime", "13.3.29", "libcudart.so.13"),
    ("nvidia-cuda-runtime", "13.4.92", "libcudart.so.13"),
    ("nvidia-cuda-runtime", "13.5.37", "libcudart.so.13"),
]


def runtime_library(package: str, version: str, library: str) -> Path:
    """The runtime's shared library, from the cache or its wheel."""
    folder = CACHE / version
    path = folder / library
    if path.is_file():
        return path
    wheels = folder / "wheel"
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(wheels),
                           f"{package}=={version}"], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"cannot download {package}=={version} (no package index?): {done.stderr.strip()[-300:]}")
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        (member,) = [n for n in z.namelist() if n.endswith("/" + library)]
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(z.read(member))
        partial.rename(path)
    wheel.unlink()
    return path


@pytest.fixture(scope="module")
def server():
    s = emulator_server_process()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def probe(nvcc) -> Path:
    return build_cuda(nvcc, "runtime_probe.cu", flags=("-x", "c++", "-cudart", "none", "-ldl"))


@pytest.fixture(scope="module")
def kernel_program(nvcc) -> Path:
    # linked against libcudart.so.13 by name: LD_LIBRARY_PATH picks the release
    return build_cuda(nvcc, "runtime_kernel.cu", shared_cudart=True,
                      flags=("-gencode", "arch=compute_90,code=compute_90"))


@pytest.mark.slow
@pytest.mark.parametrize("package, version, library", RUNTIMES, ids=[v for _, v, _ in RUNTIMES])
def test_each_runtime_release_works_under_tally(server, probe, kernel_program, package, version, library):
    lib = runtime_library(package, version, library)
    result = run_job(server.socket, probe, lib)
    assert result.returncode == 0, result.stdout + result.stderr
    major, minor = (int(x) for x in version.split(".")[:2])
    assert f"runtime {major * 1000 + minor * 10} rc=0" in result.stdout
    assert "bad=0" in result.stdout
    assert "worker thread malloc rc=0 limit rc=0 sync rc=0" in result.stdout
    if major == 13:
        ran = run_job(server.socket, kernel_program, env={"LD_LIBRARY_PATH": str(lib.parent)})
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert f"runtime {major * 1000 + minor * 10} sum=496" in ran.stdout
        assert "worker thread sum=528" in ran.stdout
    assert "cudart called slot" not in result.stderr      # no table slot tally does not know
