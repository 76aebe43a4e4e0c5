"""JIT capture of nvJitLink's cubins, end to end on the emulator (which runs PTX only, so
a cubin runs there only when its recorded PTX reached the server and matched it): PTX
and LTO-IR that NVRTC made, linked at run time with nvJitLink for the device's own
architecture (-arch=sm_XX) and loaded as the cubin nvJitLinkGetLinkedCubin gave, by a
program linked against nvJitLink and by one that dlopens it, and numba-cuda's kernels,
which cuda.core links with nvJitLink whenever the job has it."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from e2e_helpers import (Server, best_effort_beside_inference, build_cuda, emulator_server,  # noqa: F401
                         jit_cache_env, job_command, job_env, run_job)

from tally import paths
from tally.backends.registry import real_driver_present
from tally.jit import records

PROGRAM = "nvjitlink_cubin.cu"


def flags(nvjitlink_home: Path, nvrtc_home: Path, linked: bool) -> tuple[str, ...]:
    libs = (nvjitlink_home / "lib", nvrtc_home / "lib")
    out = [f"-I{nvjitlink_home / 'include'}", f"-I{nvrtc_home / 'include'}", *(f"-L{lib}" for lib in libs),
           "-l:libnvrtc.so.13", "-Xlinker", "--disable-new-dtags",
           *(f"-Xlinker=-rpath={lib}" for lib in libs), f"-L{paths.LIB_DIR}", "-lcuda", "-ldl"]
    if linked:
        out[:0] = ["-DNVJITLINK_LINKED", "-l:libnvJitLink.so.13"]
    return tuple(out)


@pytest.fixture(scope="module")
def programs(nvcc, nvjitlink_home, nvrtc_home) -> dict[str, Path]:
    """The program built twice: linked against nvJitLink, and without it (it dlopens
    nvJitLink; a library already loaded as a dependency is another case)."""
    return {how: build_cuda(nvcc, PROGRAM, flags=flags(nvjitlink_home, nvrtc_home, how == "linked"))
            for how in ("linked", "dlopen")}


CHECKED = {"one": "3000", "two": "1000", "lto": "1000"}


@pytest.mark.parametrize("how", ["linked", "dlopen"])
@pytest.mark.parametrize("inputs", ["one", "two", "lto"])
def test_an_nvjitlink_cubin_runs_on_the_emulator_from_the_ptx_it_was_linked_from(emulator_server, programs,
                                                                                 tmp_path, how, inputs):
    """one: a PTX input, recorded as it is; two: two relocatable PTX inputs (one added as a
    file, removed before the link completes), linked by tally's own linker; lto: two LTO-IR
    inputs (-lto), whose PTX nvJitLink makes in a second link with -ptx."""
    env, directory = jit_cache_env(tmp_path)
    cubin_file = tmp_path / "linked.cubin"
    job = run_job(emulator_server.socket, programs[how], how, inputs, cubin_file, env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    assert (job.value("load"), job.value("checked"), job.value("bad")) == ("0", CHECKED[inputs], "0"), job.stdout
    cubin = cubin_file.read_bytes()
    assert cubin[:4] == b"\x7fELF"
    record = records.decode(records.lookup(directory, cubin))
    assert record.producer == "nvjitlink"
    assert record.cubin_sha256 == hashlib.sha256(cubin).hexdigest()
    kernel = "scale_add" if inputs == "one" else "shift_all"
    assert f".entry {kernel}(" in record.ptx
    assert ".extern" not in record.ptx          # one module: the callee defined (or inlined by LTO), not declared
    if inputs == "two":
        assert "ld.param.f32 \t%f1, [_Z7shiftedf_param_0]" in record.ptx    # its body
    assert [p.name for p in directory.iterdir()] == [records.record_name(cubin)]
    assert "a cubin's PTX came from JIT capture" in emulator_server.process.log()


def test_a_link_made_again_finds_its_record_and_writes_nothing(emulator_server, programs, tmp_path):
    env, directory = jit_cache_env(tmp_path)
    first = run_job(emulator_server.socket, programs["dlopen"], "dlopen", "two", env=env)
    assert first.value("bad") == "0", first.stdout + first.stderr
    (record,) = directory.glob("*.rec")
    written = record.stat().st_mtime_ns
    trace = tmp_path / "trace.txt"
    again = run_job(emulator_server.socket, programs["dlopen"], "dlopen", "two",
                    env={**env, "TALLY_CLIENT_TRACE": str(trace)})
    assert again.value("bad") == "0", again.stdout + again.stderr
    assert "jit capture: recorded" not in trace.read_text()     # not linked on the server again
    assert record.stat().st_mtime_ns >= written                 # touched by its use, still the one record
    assert len(list(directory.glob("*.rec"))) == 1


def test_no_jit_capture_records_nothing_and_the_cubin_alone_does_not_run_here(emulator_server, programs,
                                                                              tmp_path):
    env, directory = jit_cache_env(tmp_path)
    for how in ("linked", "dlopen"):
        cmd = job_command(emulator_server.socket, programs[how], how, "two")
        cmd.insert(cmd.index("--"), "--no-jit-capture")
        done = subprocess.run(cmd, capture_output=True, text=True, env={**job_env(), **env}, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "load=209" in done.stdout, done.stdout   # CUDA_ERROR_NO_BINARY_FOR_GPU: a cubin, no PTX
    assert not directory.exists()


def test_a_link_made_before_the_jobs_first_cuda_call_is_recorded_too(emulator_server, programs, tmp_path):
    """nvJitLink needs no driver, so a job may link before its first CUDA call: tally's
    linker (several inputs) is on the server, so the client connects for it first."""
    env, directory = jit_cache_env(tmp_path)
    job = run_job(emulator_server.socket, programs["dlopen"], "dlopen", "two", "--link-first", env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    assert (job.value("load"), job.value("checked"), job.value("bad")) == ("0", "1000", "0"), job.stdout
    assert len(list(directory.glob("*.rec"))) == 1


def test_a_best_effort_nvjitlink_job_gets_ptb_variants_beside_a_high_priority_one(nvcc, programs, tmp_path):
    env, _ = jit_cache_env(tmp_path)
    run = best_effort_beside_inference(nvcc, tmp_path, "ptb", programs["dlopen"], "dlopen", "one", env=env)
    assert "checked=3000 bad=0" in run.best_effort, run.best_effort
    assert run.scheduler["kernels_ptb"] > 0, run.scheduler


@pytest.mark.gpu
@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_nvjitlink_cubins_on_the_gpu(programs, tmp_path, priority):
    """On a GPU (`--backend cuda`, `pytest -m gpu`): each kind of link's cubin loads with
    its record and computes right at both priorities."""
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    server = Server("cuda", extra_args=("--be-transform", "ptb"))
    try:
        env, directory = jit_cache_env(tmp_path)
        for inputs in ("one", "two", "lto"):
            job = run_job(server.socket, programs["linked"], "linked", inputs, env=env, priority=priority)
            assert job.returncode == 0, job.stdout + job.stderr
            assert (job.value("load"), job.value("bad")) == ("0", "0"), job.stdout + job.stderr
        assert len(list(directory.glob("*.rec"))) == 3
    finally:
        server.stop()
