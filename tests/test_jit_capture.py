"""JIT capture's parts without a server: the record cache (tally/jit/records.py), the
assembler wrapper tally-ptxas (ptxas_wrapper.py) running the real ptxas, the check
of a record against its cubin (ptx_match.py), tally-run's environment (job_env.py)
and the server's code choice with a record (code_choice.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptx_passes.fatbin import read_fatbin_entries
from tally.backends.base import DeviceDescription
from tally.backends.null import NullBackend
from tally.backends.ptx_variants import PtxVariantProvider
from tally.jit import job_env, records
from tally.jit.ptx_match import captured_ptx, mismatch
from tally.jit.ptxas_wrapper import REAL_ENV, output_file, ptx_input
from tally.protocol.errors import CUDA_ERROR_NO_BINARY_FOR_GPU, DeviceError
from tally.server.client.code_choice import module_source_with_record
from tally.server.client.modules import ModuleRegistry

PROGRAMS = Path(__file__).resolve().parent / "cuda" / "programs"
WRAPPER = [sys.executable, "-m", "tally.jit.ptxas_wrapper"]

VADD = PROGRAMS / "jit_kernels.cu"


@pytest.fixture(scope="module")
def vadd_ptx(tmp_path_factory, nvcc) -> Path:
    out = tmp_path_factory.mktemp("ptx") / "vadd.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=compute_80", str(VADD), "-o", str(out)], check=True)
    return out


def assemble(ptx: Path, out: Path, cache: Path, real: str, *, capture: bool = True,
             gpu: str = "sm_80") -> subprocess.CompletedProcess:
    env = {**os.environ, REAL_ENV: real}
    env.pop(records.DIR_ENV, None)
    if capture:
        env[records.DIR_ENV] = str(cache)
    return subprocess.run([*WRAPPER, "-v", f"--gpu-name={gpu}", str(ptx), "-o", str(out)], env=env,
                          capture_output=True, text=True, check=False)


def test_fnv_matches_the_reference_values():
    # FNV-1a 64 test vectors (the C++ client computes the same: jit_records.cpp)
    assert records.fnv1a64(b"") == 0xCBF29CE484222325
    assert records.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert records.fnv1a64(b"foobar") == 0x85944171F73967E8
    assert records.record_name(b"a") == "af63dc4c8601ec8c-1.rec"


def test_record_roundtrip_and_bad_records():
    data = records.encode(b"\x7fELFcubin", ".version 8.0\n.target sm_80\n", "ptxas")
    rec = records.decode(data)
    assert rec.producer == "ptxas" and rec.ptx.startswith(".version 8.0")
    with pytest.raises(records.RecordError, match="not a JIT-capture record"):
        records.decode(b"hello")
    with pytest.raises(records.RecordError, match="no end"):
        records.decode(records.MAGIC + b"cubin-sha256 " + b"0" * 64)
    with pytest.raises(records.RecordError, match="SHA-256"):
        records.decode(records.MAGIC + b"cubin-sha256 xyz\n\n.version")


def test_cache_keeps_within_its_bound_dropping_the_oldest(tmp_path):
    ptx = "x" * 1000
    written = []
    for i in range(6):
        path = records.store(tmp_path, f"cubin {i}".encode(), ptx, "ptxas", limit=3500)
        os.utime(path, ns=(i * 10**9, i * 10**9))       # distinct ages, oldest first
        written.append(path)
    records.trim(tmp_path, 3500)
    left = sorted(p.name for p in tmp_path.glob("*.rec"))
    assert sum(p.stat().st_size for p in tmp_path.glob("*.rec")) <= 3500
    assert left == sorted(p.name for p in written[-3:])    # the newest three
    # a record alone over the bound is not written at all
    assert records.store(tmp_path, b"big", "y" * 5000, "ptxas", limit=3500) is None
    assert not list(tmp_path.glob(".part-*"))


def test_max_bytes_from_the_environment():
    assert records.max_bytes({}) == records.DEFAULT_MAX_BYTES
    assert records.max_bytes({records.MAX_BYTES_ENV: "1000"}) == 1000
    assert records.max_bytes({records.MAX_BYTES_ENV: "lots"}) == records.DEFAULT_MAX_BYTES


def test_wrapper_command_line_reading(tmp_path):
    src = tmp_path / "k.ptx"
    src.write_text("")
    assert ptx_input(["-v", "--gpu-name=sm_80", str(src), "-o", "x.ptx.o"]) == str(src)
    assert ptx_input(["--version"]) is None
    assert output_file(["a.ptx", "-o", "out.cubin"]) == "out.cubin"
    assert output_file(["a.ptx", "--output-file=out.cubin"]) == "out.cubin"
    assert output_file(["a.ptx"]) is None
    # XLA's input is a temporary file without a suffix: found by what it holds
    xla = tmp_path / "tempfile-vm-1234"
    xla.write_text(".version 8.7\n.target sm_90a\n.address_size 64\n")
    other = tmp_path / "options.txt"
    other.write_text("not ptx")
    assert ptx_input([str(xla), "-o", str(tmp_path / "out"), "-arch=sm_90a", "--warn-on-spills"]) == str(xla)
    assert ptx_input([str(other), "-o", str(tmp_path / "out")]) is None


def test_wrapper_runs_real_ptxas_and_records_the_ptx(tmp_path, vadd_ptx, ptxas):
    cache = tmp_path / "cache"
    out = tmp_path / "vadd.cubin"
    done = assemble(vadd_ptx, out, cache, ptxas)
    assert done.returncode == 0, done.stderr
    assert "Used" in done.stdout + done.stderr       # ptxas -v's own report passes through
    cubin = out.read_bytes()
    raw = records.lookup(cache, cubin)
    assert raw is not None
    rec = records.decode(raw)
    assert rec.ptx == vadd_ptx.read_text()
    entry, why = captured_ptx(raw, read_fatbin_entries(cubin))
    assert why == "" and entry.kind == "ptx" and entry.arch == 80


def test_wrapper_passes_version_and_failures_through(tmp_path, ptxas):
    env = {**os.environ, REAL_ENV: ptxas, records.DIR_ENV: str(tmp_path / "cache")}
    version = subprocess.run([*WRAPPER, "--version"], env=env, capture_output=True, text=True)
    assert version.returncode == 0 and "release" in version.stdout     # what Triton checks
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_80\n.address_size 64\nthis is not ptx\n")
    failed = subprocess.run([*WRAPPER, "--gpu-name=sm_80", str(bad), "-o", str(tmp_path / "o")], env=env,
                            capture_output=True, text=True)
    assert failed.returncode != 0 and "ptxas" in failed.stderr
    assert not (tmp_path / "cache").exists()        # nothing recorded for a failed assembly


def test_wrapper_without_capture_dir_records_nothing(tmp_path, vadd_ptx, ptxas):
    out = tmp_path / "vadd.cubin"
    done = assemble(vadd_ptx, out, tmp_path / "cache", ptxas, capture=False)
    assert done.returncode == 0 and out.exists()
    assert not (tmp_path / "cache").exists()


def test_records_that_do_not_match_their_cubin_are_refused(tmp_path, vadd_ptx, ptxas):
    out = tmp_path / "vadd.cubin"
    assert assemble(vadd_ptx, out, tmp_path / "c", ptxas).returncode == 0
    cubin = out.read_bytes()
    ptx = vadd_ptx.read_text()
    entries = read_fatbin_entries(cubin)
    renamed = ptx.replace("vadd", "vsub")
    _, why = captured_ptx(records.encode(cubin, renamed, "ptxas"), entries)
    assert "only in the PTX: vsub" in why and "only in the cubin: vadd" in why
    # one more parameter: same name, another layout
    extra = ptx.replace(".param .u32 vadd_param_3", ".param .u32 vadd_param_3,\n\t.param .u64 vadd_param_4")
    assert extra != ptx
    assert "parameters differ" in mismatch(extra, cubin)
    # a record for another cubin (the SHA-256 inside is what counts, not the name)
    _, why = captured_ptx(records.encode(cubin + b"\0", ptx, "ptxas"), entries)
    assert "another cubin" in why
    _, why = captured_ptx(records.encode(cubin, ptx.replace(".entry", ".entry ("), "ptxas"), entries)
    assert "does not parse" in why
    _, why = captured_ptx(b"garbage", entries)
    assert "not a JIT-capture record" in why


def test_a_cubin_may_hold_the_device_runtimes_own_kernels_beyond_its_record(tmp_path, vadd_ptx, ptxas):
    """nvJitLink keeps libcudadevrt's whole objects, so its cubin holds the device runtime's
    file-static kernels, which tally's linker leaves out of the record's PTX: no job can
    name them, so the record still matches. Any other kernel in the cubin alone refuses it."""
    ptx = vadd_ptx.read_text()
    start = ptx.index(".visible .entry vadd(")
    entry = ptx[start:]
    internal = "__nv_static_52__f4510a67_22_cuda_device_runtime_cu_3ecce0c0_2317245__Z6helperv"
    for extra, accepted in ((internal, True), ("other", False)):
        source = tmp_path / f"{extra[:5]}.ptx"
        source.write_text(ptx + "\n" + entry.replace("vadd", extra))
        out = tmp_path / f"{extra[:5]}.cubin"
        assert assemble(source, out, tmp_path / "c", ptxas).returncode == 0
        why = mismatch(ptx, out.read_bytes())
        assert (why == "") == accepted, why
        if not accepted:
            assert "only in the cubin: other" in why


def _device(cc=(9, 0)) -> DeviceDescription:
    return DeviceDescription(name="test", uuid=bytes(16), total_memory=1 << 30, compute_capability=cc,
                             sm_count=4, driver_version=13000)


def test_code_choice_uses_a_matching_record_and_refuses_others(tmp_path, vadd_ptx, ptxas):
    out = tmp_path / "vadd.cubin"
    assert assemble(vadd_ptx, out, tmp_path / "c", ptxas).returncode == 0
    cubin = out.read_bytes()
    good = records.encode(cubin, vadd_ptx.read_text(), "ptxas")
    source, why = module_source_with_record(cubin, good, _device(), runs_cubins=False)
    assert why == "" and source.ptx == vadd_ptx.read_text().rstrip("\0") and source.original == cubin
    bad = records.encode(cubin, vadd_ptx.read_text().replace("vadd", "vsub"), "ptxas")
    with pytest.raises(DeviceError) as refused:
        module_source_with_record(cubin, bad, _device(), runs_cubins=False)
    assert refused.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU
    assert "record came with the cubin but was not used" in refused.value.message and "vsub" in refused.value.message
    # a device that runs the cubin still gets it, with the record's PTX beside it
    source, why = module_source_with_record(cubin, good, _device((8, 0)), runs_cubins=True)
    assert why == "" and source.cubins and source.ptx is not None


def test_tally_run_environment(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "tally-ptxas"
    fake.parent.mkdir()
    fake.write_text("")
    monkeypatch.setattr(job_env, "wrapper_path", lambda: fake)
    env = job_env.capture_environment({"TRITON_PTXAS_PATH": "/opt/my/ptxas"}, enabled=True, directory=tmp_path)
    assert env[records.DIR_ENV] == str(tmp_path)
    assert env["TRITON_PTXAS_PATH"] == env["TRITON_PTXAS_BLACKWELL_PATH"] == str(fake)
    assert env[REAL_ENV] == "/opt/my/ptxas"                 # the job's own assembler still runs
    # CuPy's NVRTC cubins are recorded by the client: CuPy compiles as it would, into a
    # kernel cache of tally's (no cubin there was compiled without capture)
    assert "CUPY_COMPILE_WITH_PTX" not in env
    assert env["CUPY_CACHE_DIR"] == str(job_env.cupy_cache_dir())
    own = job_env.capture_environment({"CUPY_CACHE_DIR": "/data/cupy"}, enabled=True, directory=tmp_path)
    assert own["CUPY_CACHE_DIR"] == "/data/cupy"             # a job's own choice stays
    off = job_env.capture_environment({**env, "TRITON_PTXAS_PATH": str(fake)}, enabled=False)
    assert records.DIR_ENV not in off and "CUPY_CACHE_DIR" not in off
    assert "TRITON_PTXAS_PATH" not in off and "TRITON_PTXAS_BLACKWELL_PATH" not in off
    untouched = job_env.capture_environment({"TRITON_PTXAS_PATH": "/opt/my/ptxas", "CUPY_CACHE_DIR": "/data/cupy"},
                                            enabled=False)
    assert untouched == {"TRITON_PTXAS_PATH": "/opt/my/ptxas", "CUPY_CACHE_DIR": "/data/cupy"}   # nothing set


def test_tally_run_names_its_triton_cache_manager_unless_the_job_has_one(tmp_path, monkeypatch):
    fake = tmp_path / "tally-ptxas"
    fake.write_text("")
    monkeypatch.setattr(job_env, "wrapper_path", lambda: fake)
    hook = str(job_env.TRITON_HOOK_DIR)
    env = job_env.capture_environment({"PYTHONPATH": "/srv/mine"}, enabled=True, directory=tmp_path)
    assert env["TRITON_CACHE_MANAGER"] == "tally_triton_cache:CapturingCacheManager"
    assert env["PYTHONPATH"] == os.pathsep.join([hook, "/srv/mine"])        # the job's own path stays, after
    assert (job_env.TRITON_HOOK_DIR / "tally_triton_cache.py").is_file()
    again = job_env.capture_environment(env, enabled=True, directory=tmp_path)   # a tally-run inside another
    assert again["PYTHONPATH"] == env["PYTHONPATH"]
    own = job_env.capture_environment({"TRITON_CACHE_MANAGER": "my.cache:Manager"}, enabled=True, directory=tmp_path)
    assert own["TRITON_CACHE_MANAGER"] == "my.cache:Manager" and "PYTHONPATH" not in own
    off = job_env.capture_environment(env, enabled=False)
    assert "TRITON_CACHE_MANAGER" not in off and off["PYTHONPATH"] == "/srv/mine"


def test_xla_assembles_through_the_wrapper_in_a_cuda_root_of_tallys(tmp_path, monkeypatch):
    fake = tmp_path / "venv" / "bin" / "tally-ptxas"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "nvvm" / "libdevice").mkdir(parents=True)
    (toolkit / "bin" / "ptxas").write_text("")
    monkeypatch.setattr(job_env, "wrapper_path", lambda: fake)
    env = job_env.capture_environment({"CUDA_HOME": str(toolkit), "XLA_FLAGS": "--xla_dump_to=/x"}, enabled=True,
                                      directory=tmp_path)
    root = Path(env[job_env.CUDA_ROOT_VAR])
    assert job_env.XLA_ROOT in root.parts
    assert (root / "bin" / "ptxas").resolve() == fake.resolve()
    assert (root / "bin" / "real-ptxas").resolve() == (toolkit / "bin" / "ptxas").resolve()
    assert (root / "nvvm").resolve() == (toolkit / "nvvm").resolve()
    assert env["XLA_FLAGS"] == "--xla_dump_to=/x --xla_gpu_enable_libnvptxcompiler=false"
    # a job's own choice of XLA's assembler stays; without capture nothing of this is left
    own = job_env.capture_environment({"CUDA_HOME": str(toolkit), "XLA_FLAGS": "--xla_gpu_enable_libnvptxcompiler=true"},
                                      enabled=True, directory=tmp_path)
    assert own["XLA_FLAGS"] == "--xla_gpu_enable_libnvptxcompiler=true"
    off = job_env.capture_environment(env, enabled=False)
    assert job_env.CUDA_ROOT_VAR not in off and off["XLA_FLAGS"] == "--xla_dump_to=/x"
    # no toolkit: XLA is left alone
    none = job_env.capture_environment({"CUDA_HOME": str(tmp_path / "nowhere")}, enabled=True, directory=tmp_path)
    assert job_env.CUDA_ROOT_VAR not in none and "XLA_FLAGS" not in none


def test_nvcc_compiles_through_the_wrapper_and_its_cubins_are_recorded(tmp_path, nvcc):
    """CuPy's NVCC backend and build scripts run $NVCC: tally-run names the toolkit's nvcc
    in tally's CUDA root, where the ptxas nvcc runs is tally-ptxas."""
    assert job_env.wrapper_path() is not None, "pip install puts tally-ptxas beside the interpreter"
    cache = tmp_path / "records"
    job = {k: v for k, v in os.environ.items() if k not in ("NVCC", "CUDA_ROOT", records.DIR_ENV, REAL_ENV)}
    env = job_env.capture_environment({**job, "CUDA_HOME": str(Path(nvcc).resolve().parents[1])}, enabled=True,
                                      directory=cache)
    assert job_env.XLA_ROOT in Path(env["NVCC"]).parts
    out = tmp_path / "vadd.cubin"
    done = subprocess.run([env["NVCC"], "-cubin", "-arch=sm_80", str(VADD), "-o", str(out)], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    cubin = out.read_bytes()
    raw = records.lookup(cache, cubin)
    assert raw is not None, "nvcc's ptxas run was not recorded"
    entry, why = captured_ptx(raw, read_fatbin_entries(cubin))
    assert why == "" and entry.arch == 80
    # the job's own nvcc stays; without capture no nvcc of tally's is named
    assert job_env.capture_environment({**job, "NVCC": "ccache nvcc"}, enabled=True, directory=cache)["NVCC"] == \
        "ccache nvcc"
    assert "NVCC" not in job_env.capture_environment(env, enabled=False)


class SeesSources(NullBackend):
    """The null device (it runs cubins), noting what each module load was given."""

    def __init__(self):
        super().__init__()
        self.loaded = []

    def module_load(self, source):
        self.loaded.append(source)
        return super().module_load(source)


@pytest.fixture
def captured(tmp_path, vadd_ptx, ptxas):
    out = tmp_path / "vadd.cubin"
    assert assemble(vadd_ptx, out, tmp_path / "c", ptxas, gpu="sm_90").returncode == 0   # the null device is 9.0
    cubin = out.read_bytes()
    return cubin, records.encode(cubin, vadd_ptx.read_text(), "ptxas"), vadd_ptx.read_text()


def test_best_effort_job_gets_sliced_and_ptb_variants_of_a_captured_cubin(captured):
    cubin, record, _ = captured
    provider = PtxVariantProvider()
    registry = ModuleRegistry(SeesSources(), provider)
    module = registry.load(cubin, record)
    assert module.ptx_origin == "jit" and module.variants is not None
    fn = registry.function(module.module_id, "vadd").backend_function
    assert provider.ptb(fn).function.name == "vadd__tally_ptb"
    assert provider.sliced(fn).function.name == "vadd__tally_slice"
    assert registry.ptx_sources() == {"modules": {"image": 0, "jit": 1, "none": 0},
                                      "kernels": {"image": 0, "jit": 1, "none": 0}, "jit_records_refused": 0}


def test_untransformed_captured_module_loads_its_cubin_on_a_device_that_runs_cubins(captured):
    cubin, record, _ = captured
    backend = SeesSources()
    registry = ModuleRegistry(backend, None)
    module = registry.load(cubin, record)
    assert module.ptx_origin == "jit" and module.source.ptx is not None     # kept for what needs the PTX
    (given,) = backend.loaded
    assert given.ptx is None and given.original == cubin                    # the device runs the cubin


def test_a_refused_record_leaves_the_cubin_and_is_counted(captured, caplog):
    cubin, _, ptx = captured
    registry = ModuleRegistry(SeesSources(), None)
    module = registry.load(cubin, records.encode(cubin, ptx.replace("vadd", "vsub"), "ptxas"))
    assert module.ptx_origin == "none" and module.source.ptx is None
    assert registry.ptx_sources()["jit_records_refused"] == 1
    assert "only in the PTX: vsub" in caplog.text
    plain = registry.load(cubin)
    assert plain.ptx_origin == "none"
