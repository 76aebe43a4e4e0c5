"""tally-nvlink (tally/jit/nvlink_wrapper.py): nvcc's device links under tally-run
record the PTX of the cubin nvlink makes, linked from the records of its relocatable
inputs and the device runtime; links it cannot account for are left unrecorded and
never fail. Real nvcc, ptxas and nvlink; no server (tests/test_e2e_jit_capture.py
runs such a cubin on the emulator)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ptx_passes.fatbin import read_fatbin_entries
from tally.jit import job_env, records
from tally.jit.nvlink_wrapper import compute_capability, read_command_line
from tally.jit.ptx_match import captured_ptx
from tally.jit.ptxas_wrapper import REAL_ENV

PROGRAMS = Path(__file__).resolve().parent / "cuda" / "programs"
SOURCES = [PROGRAMS / "jit_rdc_vadd.cu", PROGRAMS / "jit_rdc_add.cu"]
GENCODE = ["-gencode", "arch=compute_90,code=sm_90"]


def test_nvlink_command_line_reading():
    # what nvcc --device-link runs (seen with nvcc --dryrun)
    line = read_command_line(["-m64", "--arch=sm_90", "-L/cuda/lib/stubs", "-L/cuda/lib", "-cpu-arch=X86_64",
                              "a.o", "b.o", "-lcudadevrt", "-o", "ab.cubin", "--host-ccbin", "gcc"])
    assert (line.inputs, line.libraries, line.output, line.arch) == (["a.o", "b.o"], ["cudadevrt"], "ab.cubin",
                                                                     "sm_90")
    assert line.library_paths == ["/cuda/lib/stubs", "/cuda/lib"] and line.unrecorded == ""
    spaced = read_command_line(["-arch", "sm_121", "-l", "x,y", "--library-path", "/p,/q", "--output-file=o", "i.o"])
    assert (spaced.libraries, spaced.library_paths, spaced.output, spaced.inputs) == (["x", "y"], ["/p", "/q"], "o",
                                                                                     ["i.o"])
    assert "link-time optimization" in read_command_line(["-lto", "--arch=sm_90", "a.o", "-o", "x"]).unrecorded
    assert read_command_line(["-lto", "a.o"]).libraries == []          # -lto is no library "to"
    assert "relocatable" in read_command_line(["-r", "a.o", "-o", "x.o"]).unrecorded
    assert [compute_capability(a) for a in ("sm_90", "sm_90a", "sm_121", "sm_100f", "compute_90", None)] == \
        [(9, 0), (9, 0), (12, 1), (10, 0), None, None]


def _capture_env(cache: Path, nvcc: str) -> dict:
    job = {k: v for k, v in os.environ.items() if k not in ("NVCC", "CUDA_ROOT", records.DIR_ENV, REAL_ENV)}
    env = job_env.capture_environment({**job, "CUDA_HOME": str(Path(nvcc).resolve().parents[1])}, enabled=True,
                                      directory=cache)
    return {**env, "TALLY_JIT_DEBUG": "1"}


def _run(cmd: list, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_device_link_through_nvcc_records_the_linked_ptx(tmp_path, nvcc):
    """nvcc -dc, then nvcc --cubin --device-link (CuPy's NVCC backend): the cubin's record is
    the two translation units' PTX linked with the device runtime's, and it matches."""
    cache = tmp_path / "records"
    env = _capture_env(cache, nvcc)
    assert Path(env["CUDA_ROOT"], "bin", "nvlink").resolve().name == "tally-nvlink"
    _run([env["NVCC"], *GENCODE, "-dc", *SOURCES], env, tmp_path)
    assert len(list(cache.glob("*.rec"))) == 2          # tally-ptxas recorded each relocatable cubin
    _run([env["NVCC"], "--cubin", *GENCODE, "--device-link", "jit_rdc_vadd.o", "jit_rdc_add.o", "-o", "linked.cubin"],
         env, tmp_path)
    cubin = (tmp_path / "linked.cubin").read_bytes()
    raw = records.lookup(cache, cubin)
    assert raw is not None, "the device link was not recorded"
    rec = records.decode(raw)
    assert rec.producer == "nvlink"
    assert ".entry vadd(" in rec.ptx and ".entry vadd_block(" in rec.ptx and "add_pair" in rec.ptx
    assert "__cudaCDP2LaunchDeviceV2" in rec.ptx        # the device runtime, linked from libcudadevrt's PTX
    entry, why = captured_ptx(raw, read_fatbin_entries(cubin))
    assert why == "" and entry.arch == 90


def test_a_link_of_inputs_without_ptx_is_not_recorded_and_still_links(tmp_path, nvcc):
    """Objects compiled before tally-run (no records, SASS only): the link is the job's as
    ever, and nothing is recorded; the debug switch says why."""
    _run([nvcc, *GENCODE, "-dc", *SOURCES], dict(os.environ), tmp_path)
    cache = tmp_path / "records"
    env = {**os.environ, records.DIR_ENV: str(cache), "TALLY_JIT_DEBUG": "1"}
    lib = Path(nvcc).resolve().parents[1] / "targets" / "x86_64-linux" / "lib"
    done = _run([sys.executable, "-m", "tally.jit.nvlink_wrapper", "--arch=sm_90", f"-L{lib}", "jit_rdc_vadd.o",
                 "jit_rdc_add.o", "-lcudadevrt", "-o", "linked.cubin"], env, tmp_path)
    assert (tmp_path / "linked.cubin").read_bytes()[:4] == b"\x7fELF"
    assert "not recorded" in done.stderr and "holds no PTX" in done.stderr, done.stderr
    assert not cache.exists() or not list(cache.glob("*.rec"))


def test_a_failed_link_passes_through_and_records_nothing(tmp_path, nvcc):
    cache = tmp_path / "records"
    env = _capture_env(cache, nvcc)
    _run([env["NVCC"], *GENCODE, "-dc", SOURCES[0]], env, tmp_path)
    # add_pair is defined nowhere: nvlink's own error, its exit status
    failed = subprocess.run([env["NVCC"], "--cubin", *GENCODE, "--device-link", "jit_rdc_vadd.o", "-o", "x.cubin"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "add_pair" in failed.stderr, failed.stderr
    assert len(list(cache.glob("*.rec"))) == 1          # the -dc's only


def test_a_recording_that_breaks_never_fails_the_link(monkeypatch, capsys):
    from tally.jit import nvlink_wrapper

    def broken(_args):
        raise RuntimeError("a bug in recording")

    monkeypatch.setattr(nvlink_wrapper, "record", broken)
    monkeypatch.setenv("TALLY_JIT_DEBUG", "1")
    assert nvlink_wrapper.main(["--version"]) == 0          # nvlink's own answer and status
    assert "RuntimeError: a bug in recording" in capsys.readouterr().err
