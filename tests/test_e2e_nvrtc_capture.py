"""JIT capture of NVRTC's cubins, end to end on the emulator (which runs PTX only, so a
cubin runs there only when its recorded PTX reached the server and matched it): CUDA
C++ compiled at run time for the device's own architecture (-arch=sm_XX) and loaded as
the cubin nvrtcGetCUBIN gave, by a program linked against NVRTC, by one that dlopens
it, and through cuda-bindings, all under the real tally-run."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e_helpers import (PROGRAMS, Server, best_effort_beside_inference, build_cuda,  # noqa: F401
                         emulator_server, jit_cache_env, job_command, job_env, run_job)

from tally import paths
from tally.backends.registry import real_driver_present
from tally.jit import records


@pytest.fixture(scope="module")
def program(nvcc, nvrtc_home) -> Path:
    lib = nvrtc_home / "lib"
    # DT_RPATH (not RUNPATH): NVRTC finds libnvrtc-builtins through the program's
    return build_cuda(nvcc, "nvrtc_cubin.cu", flags=(f"-I{nvrtc_home / 'include'}", f"-L{lib}",
                                                     "-l:libnvrtc.so.13", "-Xlinker", "--disable-new-dtags",
                                                     "-Xlinker", f"-rpath={lib}", f"-L{paths.LIB_DIR}", "-lcuda",
                                                     "-ldl"))


@pytest.mark.parametrize("how", ["linked", "dlopen"])
def test_an_nvrtc_cubin_runs_on_the_emulator_from_the_ptx_nvrtc_made_it_from(emulator_server, program, tmp_path,
                                                                            how):
    env, directory = jit_cache_env(tmp_path)
    cubin_file = tmp_path / "kernels.cubin"
    job = run_job(emulator_server.socket, program, how, cubin_file, env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    assert (job.value("load"), job.value("checked"), job.value("bad")) == ("0", "9000", "0"), job.stdout
    cubin = cubin_file.read_bytes()
    assert cubin[:4] == b"\x7fELF"
    # the record the client wrote: found by the cubin's key, named by its SHA-256
    record = records.decode(records.lookup(directory, cubin))
    assert record.producer == "nvrtc"
    assert record.cubin_sha256 == hashlib.sha256(cubin).hexdigest()
    assert ".entry square(" in record.ptx and "axpy" in record.ptx
    assert [p.name for p in directory.iterdir()] == [records.record_name(cubin)]   # no partial files left
    assert "a cubin's PTX came from JIT capture" in emulator_server.process.log()


def test_relocatable_nvrtc_cubins_link_from_their_records(emulator_server, program, tmp_path):
    """NVRTC's -dc cubins linked with cuLink (one passed as a cubin, one as PTX, as CuPy
    passes them): each input's record goes with it and the server links the PTX."""
    env, directory = jit_cache_env(tmp_path)
    job = run_job(emulator_server.socket, program, "rdc", env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    assert (job.value("linked"), job.value("checked"), job.value("bad")) == ("0", "1000", "0"), job.stdout
    assert len(list(directory.glob("*.rec"))) == 2


def test_a_cubin_compiled_again_replaces_its_record_and_the_cache_keeps_its_bound(emulator_server, program,
                                                                                  tmp_path):
    env, directory = jit_cache_env(tmp_path)
    first = run_job(emulator_server.socket, program, "linked", tmp_path / "k.cubin", env=env)
    assert first.value("bad") == "0", first.stdout + first.stderr
    (record,) = directory.glob("*.rec")
    size = record.stat().st_size
    good = record.read_bytes()
    record.write_bytes(b"not a record of this cubin")      # damaged, or another cubin's under a colliding key
    # older records of other jobs; with the bound at one record and a half, the oldest go
    old = []
    for i in range(3):
        path = directory / f"{i:016x}-10.rec"
        path.write_bytes(b"x" * (size // 2))
        os.utime(path, (time.time() - 1000 + i, time.time() - 1000 + i))
        old.append(path)
    again = run_job(emulator_server.socket, program, "linked",
                    env={**env, records.MAX_BYTES_ENV: str(size * 3 // 2)})
    assert again.value("bad") == "0", again.stdout + again.stderr
    assert record.read_bytes() == good                           # written whole again, then used
    assert sorted(p.name for p in directory.iterdir()) == sorted([record.name, old[2].name])
    assert sum(p.stat().st_size for p in directory.iterdir()) <= size * 3 // 2


def test_no_jit_capture_records_nothing_and_the_cubin_alone_does_not_run_here(emulator_server, program,
                                                                              tmp_path):
    env, directory = jit_cache_env(tmp_path)

    def without_capture(how: str) -> subprocess.CompletedProcess:
        cmd = job_command(emulator_server.socket, program, how)
        cmd.insert(cmd.index("--"), "--no-jit-capture")
        return subprocess.run(cmd, capture_output=True, text=True, env={**job_env(), **env}, timeout=120)

    for how in ("linked", "dlopen"):
        done = without_capture(how)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "load=209" in done.stdout, done.stdout   # CUDA_ERROR_NO_BINARY_FOR_GPU: a cubin, no PTX
    done = without_capture("rdc")
    assert "linked=209" in done.stdout, done.stdout + done.stderr     # the linker links PTX only
    assert "caller: holds no PTX (cubins: sm_90)" in done.stderr
    assert not directory.exists()


def test_cuda_bindings_nvrtc_cubin_runs_on_the_emulator(emulator_server, tmp_path):
    env, directory = jit_cache_env(tmp_path)
    job = run_job(emulator_server.socket, Path(sys.executable), PROGRAMS / "nvrtc_cuda_bindings.py", env=env,
                  timeout=180)
    assert job.returncode == 0, job.stdout + job.stderr
    assert (job.value("load"), job.value("checked"), job.value("bad")) == ("0", "4096", "0"), job.stdout
    (record,) = directory.glob("*.rec")
    assert records.decode(record.read_bytes()).producer == "nvrtc"


def test_a_best_effort_nvrtc_job_gets_ptb_variants_beside_a_high_priority_one(nvcc, program, tmp_path):
    env, _ = jit_cache_env(tmp_path)
    run = best_effort_beside_inference(nvcc, tmp_path, "ptb", program, "dlopen", env=env)
    assert "checked=9000 bad=0" in run.best_effort, run.best_effort
    assert run.scheduler["kernels_ptb"] > 0, run.scheduler


@pytest.mark.gpu
@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_nvrtc_cubins_on_the_gpu(program, tmp_path, priority):
    """On a GPU (`--backend cuda`, `pytest -m gpu`): the cubin NVRTC made for the GPU's own
    architecture loads with its record, and computes right at both priorities (as the
    cubin itself, or a best-effort variant made from its PTX)."""
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    server = Server("cuda", extra_args=("--be-transform", "ptb"))
    try:
        env, directory = jit_cache_env(tmp_path)
        for how in ("linked", "dlopen"):
            job = run_job(server.socket, program, how, env=env, priority=priority)
            assert job.returncode == 0, job.stdout + job.stderr
            assert (job.value("load"), job.value("bad")) == ("0", "0"), job.stdout + job.stderr
        assert len(list(directory.glob("*.rec"))) == 1
        assert "a cubin's PTX came from JIT capture" in server.process.log()
    finally:
        server.stop()
