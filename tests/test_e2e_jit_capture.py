"""JIT capture end to end: a cubin assembled by tally-ptxas from PTX (as a JIT
compiler's would be, no Triton needed), loaded by an nvcc-built program with
cuModuleLoadData under the real tally-run, on the emulator, which runs PTX only:
it runs only when the record reaches the server and matches the cubin."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import build_cuda, emulator_server_process, finish, job_command, job_env, run_job, tell

from tally import paths
from tally.jit import records

PROGRAMS = Path(__file__).resolve().parent / "cuda" / "programs"
DRIVER_FLAGS = (f"-L{paths.LIB_DIR}", "-lcuda")


@pytest.fixture(scope="module")
def program(nvcc) -> Path:
    return build_cuda(nvcc, "jit_cubin.cu", flags=DRIVER_FLAGS)


@pytest.fixture(scope="module")
def server():
    server = emulator_server_process()
    yield server
    server.stop()


@pytest.fixture
def jit(tmp_path, nvcc, ptxas):
    """(the job's environment with a private cache home, the cubin, its PTX, the records' folder)."""
    home = tmp_path / "cache-home"
    env = {"XDG_CACHE_HOME": str(home)}
    ptx = tmp_path / "kernels.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=compute_80", str(PROGRAMS / "jit_kernels.cu"), "-o", str(ptx)], check=True)
    cubin = tmp_path / "kernels.ptx.o"
    directory = home / "tally" / "jit-ptx"
    # what tally-run names for the job: the wrapper, with the cache folder
    done = subprocess.run([sys.executable, "-m", "tally.jit.ptxas_wrapper", "--gpu-name=sm_80", str(ptx), "-o",
                           str(cubin)], env={**os.environ, "TALLY_REAL_PTXAS": ptxas, records.DIR_ENV: str(directory)},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return env, cubin, ptx, directory


def test_a_captured_cubin_runs_on_the_emulator_and_status_says_where_its_ptx_came_from(server, program, jit):
    env, cubin, _ptx, directory = jit
    assert len(list(directory.glob("*.rec"))) == 1
    job = subprocess.Popen(job_command(server.socket, program, cubin, "wait"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env={**job_env(), **env})
    try:
        assert job.stdout.readline().strip() == "load=0"
        assert job.stdout.readline().strip() == "checked=1000 bad=0"
        assert job.stdout.readline().strip() == "ready"
        (client,) = [c for c in server.status()["clients"] if c["pid"] != os.getpid()]
        sources = client["ptx_sources"]
        assert sources["modules"] == {"image": 0, "jit": 1, "none": 0}
        assert sources["kernels"]["jit"] == 1 and sources["jit_records_refused"] == 0
    finally:
        tell(job, "go")
        result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "a cubin's PTX came from JIT capture" in server.process.log()


def test_a_record_that_does_not_match_its_cubin_is_never_used(server, program, jit):
    env, cubin, ptx, directory = jit
    (record,) = directory.glob("*.rec")
    # the right cubin's SHA-256, but PTX whose kernel has another name
    record.write_bytes(records.encode(cubin.read_bytes(), ptx.read_text().replace("vadd", "vsub"), "ptxas"))
    result = run_job(server.socket, program, cubin, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("load") == "209"          # CUDA_ERROR_NO_BINARY_FOR_GPU: the cubin alone, on the emulator
    log = server.process.log()
    assert "a JIT-capture record came with the cubin but was not used" in log and "only in the PTX: vsub" in log
    assert "only in the PTX: vsub" in result.stderr     # the job's own error log says why too
    # the server and other jobs carry on: the same cubin with its true record runs
    record.write_bytes(records.encode(cubin.read_bytes(), ptx.read_text(), "ptxas"))
    again = run_job(server.socket, program, cubin, env=env)
    assert (again.value("load"), again.value("bad")) == ("0", "0")


def test_a_device_linked_cubin_runs_on_the_emulator(server, program, tmp_path, nvcc):
    """nvcc -dc and --device-link under tally-run's environment (tally-ptxas records each
    translation unit, tally-nvlink the link): vadd launches a kernel that calls a function of
    the other unit, and runs on the emulator from the linked record."""
    from tally.jit.job_env import capture_environment
    home = tmp_path / "cache-home"
    env = {"XDG_CACHE_HOME": str(home)}
    build = capture_environment({**{k: v for k, v in os.environ.items() if k not in ("NVCC", "CUDA_ROOT")}, **env},
                                enabled=True, directory=home / "tally" / "jit-ptx")
    gencode = ["-gencode", "arch=compute_80,code=sm_80"]
    sources = [str(PROGRAMS / "jit_rdc_vadd.cu"), str(PROGRAMS / "jit_rdc_add.cu")]
    for cmd in ([build["NVCC"], *gencode, "-dc", *sources],
                [build["NVCC"], "--cubin", *gencode, "--device-link", "jit_rdc_vadd.o", "jit_rdc_add.o", "-o",
                 "linked.cubin"]):
        done = subprocess.run(cmd, env=build, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    job = run_job(server.socket, program, tmp_path / "linked.cubin", env=env)
    assert (job.value("load"), job.value("checked"), job.value("bad")) == ("0", "1000", "0"), job.stdout + job.stderr


def test_no_jit_capture_leaves_nothing_behind_and_reads_no_record(server, program, jit, tmp_path):
    env, cubin, _ptx, directory = jit
    cmd = job_command(server.socket, program, cubin)
    cmd.insert(cmd.index("--"), "--no-jit-capture")
    done = subprocess.run(cmd, capture_output=True, text=True, env={**job_env(), **env}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "load=209" in done.stdout       # the record exists, but capture is off: the cubin alone
    # what the job sees: no capture folder, no wrapper for Triton
    probe = job_command(server.socket, Path(sys.executable), "-c",
                        "import os; print(sorted(k for k in os.environ if 'PTXAS' in k or 'JIT_CAPTURE' in k))")
    probe.insert(probe.index("--"), "--no-jit-capture")
    seen = subprocess.run(probe, capture_output=True, text=True, env={**job_env(), **env}, timeout=120)
    assert seen.stdout.strip() == "[]", seen.stdout + seen.stderr
    probe.remove("--no-jit-capture")
    on = subprocess.run(probe, capture_output=True, text=True, env={**job_env(), **env}, timeout=120)
    assert "TRITON_PTXAS_PATH" in on.stdout and records.DIR_ENV in on.stdout, on.stdout + on.stderr


@pytest.fixture
def triton_cached(tmp_path, nvcc, ptxas):
    """A kernel as Triton's cache holds one it compiled without tally-run: its PTX and the
    cubin ptxas made of it (no record), side by side in a folder named by its key, and
    the group file that lists them. Returns (the job's env, the cubin, the group)."""
    home = tmp_path / "cache-home"
    entry = tmp_path / "triton-cache" / "4DWRUTJ6NW3PMEEEQLZ4PBFX6I"
    entry.mkdir(parents=True)
    ptx, cubin = entry / "vadd.ptx", entry / "vadd.cubin"
    subprocess.run([nvcc, "-ptx", "-arch=compute_80", str(PROGRAMS / "jit_kernels.cu"), "-o", str(ptx)], check=True)
    subprocess.run([ptxas, "--gpu-name=sm_80", str(ptx), "-o", str(cubin)], check=True)
    group = {"vadd.ptx": str(ptx), "vadd.cubin": str(cubin), "vadd.json": str(entry / "vadd.json")}
    (entry / "vadd.json").write_text("{}")
    (entry / "__grp__vadd.json").write_text(json.dumps({"child_paths": group}))
    return {"XDG_CACHE_HOME": str(home)}, cubin, entry / "__grp__vadd.json"


def _adopt_in_a_job_interpreter(job: dict, group_file: Path, cwd: Path) -> subprocess.CompletedProcess:
    """What Triton's lookup does in a job with environment `job`: imports the cache hook
    module from PYTHONPATH (with -S: from that folder alone, tally itself not importable)
    and hands it the group's files, twice; prints what each call wrote."""
    code = ("import json, sys, importlib.util\n"
            "assert importlib.util.find_spec('tally') is None\n"
            "import tally_triton_cache as hook\n"
            f"group = json.load(open({str(group_file)!r}))['child_paths']\n"
            "print('record=' + str(hook.adopt(group)))\n"
            "print('again=' + str(hook.adopt(group)))\n")
    return subprocess.run([sys.executable, "-S", "-c", code], env=job, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_a_kernel_from_tritons_cache_made_without_tally_run_keeps_its_ptx(server, program, triton_cached,
                                                                          tmp_path):
    env, cubin, group_file = triton_cached
    # without the record the emulator cannot run the cubin
    assert run_job(server.socket, program, cubin, env=env).value("load") == "209"
    from tally.jit.job_env import capture_environment
    job = capture_environment({**os.environ, **env}, enabled=True,
                              directory=Path(env["XDG_CACHE_HOME"]) / "tally" / "jit-ptx")
    adopted = _adopt_in_a_job_interpreter(job, group_file, tmp_path)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    directory = tmp_path / "cache-home" / "tally" / "jit-ptx"
    (record,) = directory.glob("*.rec")
    assert f"record={record}" in adopted.stdout and "again=None" in adopted.stdout   # written once
    assert records.decode(record.read_bytes()).producer == "triton-cache"
    job = run_job(server.socket, program, cubin, env=env)
    assert (job.value("load"), job.value("bad")) == ("0", "0"), job.stdout + job.stderr


def test_the_cache_hook_writes_nothing_without_capture(triton_cached, tmp_path):
    env, _cubin, group_file = triton_cached
    from tally.jit.job_env import TRITON_HOOK_DIR, capture_environment
    job = capture_environment({**os.environ, **env}, enabled=False)
    job["PYTHONPATH"] = str(TRITON_HOOK_DIR)
    done = _adopt_in_a_job_interpreter(job, group_file, tmp_path)
    assert done.stdout.split() == ["record=None", "again=None"], done.stdout + done.stderr
    assert not (tmp_path / "cache-home").exists()
