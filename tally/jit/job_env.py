"""What tally-run puts in a job's environment for JIT capture (or takes out of it).

With capture on (the default): TALLY_JIT_CAPTURE_DIR names the record cache, which
the job's client library reads at cubin loads, and Triton's assembler variables
(`TRITON_PTXAS_PATH`, and `TRITON_PTXAS_BLACKWELL_PATH`, which Triton reads instead
for compute capability 9.0 and newer) name tally-ptxas. An assembler the job named
itself stays the one that runs: tally-ptxas runs it (TALLY_REAL_PTXAS).
CuPy compiles its kernels with NVRTC to cubins unless CUPY_COMPILE_WITH_PTX is set,
its documented switch to PTX: tally-run sets it to 1 (a job that set it keeps its
own value), so CuPy's kernels reach tally as PTX (the driver, or tally's
emulator, compiles them at load; CuPy's cache keys on the target, so cubins it
cached before are not reused for them).
With --no-jit-capture none of this is set, so nothing is written and no record is read.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tally.jit import records
from tally.jit.ptxas_wrapper import REAL_ENV

TRITON_ASSEMBLER_VARS = ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH")
CUPY_PTX_VAR = "CUPY_COMPILE_WITH_PTX"
WRAPPER = "tally-ptxas"


def wrapper_path() -> Path | None:
    """tally-ptxas beside the running interpreter (tally's venv), else on PATH."""
    beside = Path(sys.executable).parent / WRAPPER
    if beside.is_file():
        return beside
    found = shutil.which(WRAPPER)
    return Path(found) if found else None


def capture_environment(env: dict, enabled: bool, directory: Path | None = None) -> dict:
    out = dict(env)
    wrapper = wrapper_path() if enabled else None
    if wrapper is None:
        out.pop(records.DIR_ENV, None)
        # a job started by a tally-run inside another keeps no wrapper the outer one named
        for var in TRITON_ASSEMBLER_VARS:
            if Path(out.get(var, "")).name == WRAPPER:
                out.pop(var)
        return out
    out[records.DIR_ENV] = str(directory or records.default_dir())
    own = [env[v] for v in TRITON_ASSEMBLER_VARS if env.get(v) and Path(env[v]).name != WRAPPER]
    if own and not env.get(REAL_ENV):
        out[REAL_ENV] = own[0]
    for var in TRITON_ASSEMBLER_VARS:
        out[var] = str(wrapper)
    out.setdefault(CUPY_PTX_VAR, "1")
    return out
