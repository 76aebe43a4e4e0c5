"""What tally-run puts in a job's environment for JIT capture (or takes out of it).

With capture on (the default): TALLY_JIT_CAPTURE_DIR names the record cache, which
the job's client library reads at cubin loads, and Triton's assembler variables
(`TRITON_PTXAS_PATH`, and `TRITON_PTXAS_BLACKWELL_PATH`, which Triton reads instead
for compute capability 9.0 and newer) name tally-ptxas. An assembler the job named
itself stays the one that runs: tally-ptxas runs it (TALLY_REAL_PTXAS).
CuPy compiles its kernels with NVRTC to cubins, whose PTX the client records
(client_preload/src/jit_capture/nvrtc_capture.h), so they run as cubins where no
transform is needed. CuPy keeps the cubins it compiled in a cache of its own
(~/.cupy/kernel_cache), where those compiled without tally-run have no record:
tally-run names a folder in tally's cache in CUPY_CACHE_DIR (a job that set it keeps
its own), so each cubin CuPy finds there was compiled, and recorded, under capture.
XLA (JAX) assembles its kernels with libnvptxcompiler inside its plugin, where no
wrapper can see them; with `--xla_gpu_enable_libnvptxcompiler=false` (added to
XLA_FLAGS unless the job says otherwise) it runs `<cuda root>/bin/ptxas` instead,
and JAX takes its cuda root from CUDA_ROOT: tally-run points that at a folder of
its own (in tally's cache) whose `bin/ptxas` is tally-ptxas, whose `bin/nvlink` is
tally-nvlink (nvlink_wrapper.py) and whose `nvvm` and other tools are the CUDA
toolkit's ($CUDA_HOME, else /usr/local/cuda), or those of the job's own CUDA_ROOT
when it set one. Where there is no toolkit, XLA is left alone.
The same folder links the rest of the toolkit (its nvcc sees the folder as its root, and
nvcc runs the ptxas and nvlink beside it), and tally-run names its nvcc in NVCC unless
the job set that: CuPy (its NVCC backend, RawModule(backend='nvcc')) and build scripts
that honor NVCC compile through it, so the cubins nvcc makes, device-linked ones
included, have their PTX recorded too.
Kernels Triton compiled before, without tally-run, come from its cache without an
assembler run: TRITON_CACHE_MANAGER names tally's cache manager (Triton's own file
cache that also records a cached cubin's PTX: triton_hook/tally_triton_cache.py),
whose folder goes first on PYTHONPATH; a job that named its own manager keeps it.
NVRTC's cubins (nvrtcGetCUBIN) need nothing here but TALLY_JIT_CAPTURE_DIR: the client
library records the PTX NVRTC keeps for them (client_preload/src/jit_capture/nvrtc_capture.h).
With --no-jit-capture none of this is set, so nothing is written and no record is read.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from tally import paths
from tally.jit import nvlink_wrapper, records
from tally.jit.ptxas_wrapper import REAL_BESIDE, REAL_ENV

TRITON_ASSEMBLER_VARS = ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH")
CUPY_CACHE_VAR = "CUPY_CACHE_DIR"
CUPY_CACHE = "cupy-kernels"         # CuPy's kernel cache under tally-run, in tally's cache
XLA_FLAGS_VAR = "XLA_FLAGS"
XLA_ASSEMBLER_FLAG = "--xla_gpu_enable_libnvptxcompiler"
CUDA_ROOT_VAR = "CUDA_ROOT"
NVCC_VAR = "NVCC"
XLA_ROOT = "jit-cuda-root"          # the folder tally-run names in CUDA_ROOT, in tally's cache
WRAPPER = "tally-ptxas"
LINK_WRAPPER = "tally-nvlink"
TRITON_CACHE_VAR = "TRITON_CACHE_MANAGER"
TRITON_CACHE_MANAGER = "tally_triton_cache:CapturingCacheManager"
TRITON_HOOK_DIR = Path(__file__).resolve().parent / "triton_hook"


def wrapper_path() -> Path | None:
    """tally-ptxas beside the running interpreter (tally's venv), else on PATH."""
    beside = Path(sys.executable).parent / WRAPPER
    if beside.is_file():
        return beside
    found = shutil.which(WRAPPER)
    return Path(found) if found else None


def cupy_cache_dir() -> Path:
    return paths.cache_dir() / CUPY_CACHE


def capture_environment(env: dict, enabled: bool, directory: Path | None = None) -> dict:
    out = dict(env)
    wrapper = wrapper_path() if enabled else None
    if wrapper is None:
        out.pop(records.DIR_ENV, None)
        # a job started by a tally-run inside another keeps no wrapper the outer one named
        for var in TRITON_ASSEMBLER_VARS:
            if Path(out.get(var, "")).name == WRAPPER:
                out.pop(var)
        if XLA_ROOT in Path(out.get(NVCC_VAR, "")).parts:           # nor the nvcc it named
            out.pop(NVCC_VAR)
        if XLA_ROOT in Path(out.get(CUDA_ROOT_VAR, "")).parts:     # and no XLA routing it set
            out.pop(CUDA_ROOT_VAR)
            flags = out.get(XLA_FLAGS_VAR, "").replace(f"{XLA_ASSEMBLER_FLAG}=false", "").strip()
            if flags:
                out[XLA_FLAGS_VAR] = flags
            else:
                out.pop(XLA_FLAGS_VAR, None)
        if out.get(TRITON_CACHE_VAR) == TRITON_CACHE_MANAGER:
            out.pop(TRITON_CACHE_VAR)
        if out.get(CUPY_CACHE_VAR) == str(cupy_cache_dir()):
            out.pop(CUPY_CACHE_VAR)
        entries = out.get("PYTHONPATH", "").split(os.pathsep)
        if str(TRITON_HOOK_DIR) in entries:      # an outer tally-run's
            _set_python_path(out, [p for p in entries if p != str(TRITON_HOOK_DIR)])
        return out
    out[records.DIR_ENV] = str(directory or records.default_dir())
    own = [env[v] for v in TRITON_ASSEMBLER_VARS if env.get(v) and Path(env[v]).name != WRAPPER]
    if own and not env.get(REAL_ENV):
        out[REAL_ENV] = own[0]
    for var in TRITON_ASSEMBLER_VARS:
        out[var] = str(wrapper)
    out.setdefault(CUPY_CACHE_VAR, str(cupy_cache_dir()))
    _route_toolkit_through(wrapper, env, out)
    if out.setdefault(TRITON_CACHE_VAR, TRITON_CACHE_MANAGER) == TRITON_CACHE_MANAGER:
        rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(TRITON_HOOK_DIR)]
        _set_python_path(out, [str(TRITON_HOOK_DIR), *rest])
    return out


def _set_python_path(out: dict, entries: list[str]) -> None:
    entries = [e for e in entries if e]
    if entries:
        out["PYTHONPATH"] = os.pathsep.join(entries)
    else:
        out.pop("PYTHONPATH", None)


def _route_toolkit_through(wrapper: Path, env: dict, out: dict) -> None:
    """XLA's assembler and nvcc's become `wrapper` (see the module docstring)."""
    toolkit = Path(env.get(CUDA_ROOT_VAR) or env.get("CUDA_HOME") or "/usr/local/cuda")
    real_ptxas = toolkit / "bin" / "ptxas"
    if not real_ptxas.is_file() or not (toolkit / "nvvm").is_dir():
        return
    root = paths.cache_dir() / XLA_ROOT / hashlib.sha256(f"{toolkit}\0{wrapper}".encode()).hexdigest()[:16]
    try:
        (root / "bin").mkdir(parents=True, exist_ok=True)
        links = [(root / "bin" / "ptxas", wrapper), (root / "bin" / REAL_BESIDE, real_ptxas)]
        wrapped = {"ptxas"}
        link_wrapper = wrapper.parent / LINK_WRAPPER
        if link_wrapper.is_file() and (toolkit / "bin" / "nvlink").is_file():
            links += [(root / "bin" / "nvlink", link_wrapper),
                      (root / "bin" / nvlink_wrapper.REAL_BESIDE, toolkit / "bin" / "nvlink")]
            wrapped.add("nvlink")
        links += [(root / e.name, e) for e in toolkit.iterdir() if e.name != "bin"]
        links += [(root / "bin" / e.name, e) for e in (toolkit / "bin").iterdir() if e.name not in wrapped]
        for link, target in links:
            if not link.is_symlink() or Path(os.readlink(link)) != target:
                link.unlink(missing_ok=True)
                link.symlink_to(target)
    except OSError:
        return                          # a cache we cannot write: XLA and nvcc keep their own assembler
    out[CUDA_ROOT_VAR] = str(root)
    flags = env.get(XLA_FLAGS_VAR, "")
    if XLA_ASSEMBLER_FLAG not in flags:
        out[XLA_FLAGS_VAR] = f"{flags} {XLA_ASSEMBLER_FLAG}=false".strip()
    if (root / "bin" / "nvcc").is_file():
        out.setdefault(NVCC_VAR, str(root / "bin" / "nvcc"))
