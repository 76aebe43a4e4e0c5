"""tally-ptxas: the assembler a job's JIT compilers run under tally-run.

It takes ptxas's own command line, runs the real ptxas with it unchanged (same
arguments, input, output, exit status and messages), and when that produced a
cubin from a PTX file, stores the PTX in the record cache keyed by the cubin
(records.py). Anything it cannot record it leaves alone: the job's compile never
fails because of tally. The real assembler is, in order:
1. $TALLY_REAL_PTXAS (tally-run sets it to the job's own TRITON_PTXAS_PATH when
   the job named one);
2. the ptxas Triton ships, when the process that runs us has Triton loaded (its
   libtriton.so in /proc/<parent>/maps: that is the ptxas Triton would have run);
3. `real-ptxas` beside the name it was run under (the CUDA root tally-run makes
   for XLA names the toolkit's ptxas so: job_env.py);
4. ptxas on PATH, then /usr/local/cuda/bin/ptxas.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from tally.jit import records

REAL_ENV = "TALLY_REAL_PTXAS"
REAL_BESIDE = "real-ptxas"      # beside the name we run under: the assembler to run (job_env.py's CUDA_ROOT)
CUDA_PTXAS = Path("/usr/local/cuda/bin/ptxas")
TRITON_LIBRARY = "/triton/_C/libtriton.so"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv

    def record_quietly(a: list[str]) -> str:
        record(a)            # None (nothing assembled from PTX) is no news
        return ""

    return run_then_record("ptxas", real_ptxas(), args, record_quietly,
                           "set TALLY_REAL_PTXAS, or put the CUDA toolkit's ptxas on PATH")


def run_then_record(tool: str, real: Path | None, args: list[str], record_run: Callable[[list[str]], str],
                    how_to_find: str) -> int:
    """What each JIT wrapper does: run the real `tool` with the job's command line and
    pass its status on; after a success, `record_run(args)` (why nothing was recorded,
    or ""). Recording never fails the job's run: its errors, like its reasons, are
    printed only with TALLY_JIT_DEBUG set."""
    if real is None:
        print(f"tally-{tool}: no {tool} found to run ({how_to_find}); run the job with tally-run "
              "--no-jit-capture to use its own", file=sys.stderr)
        return 127
    done = subprocess.run([str(real), *args])
    if done.returncode == 0:
        try:
            why = record_run(args)
        except Exception as e:      # noqa: BLE001 - the tool succeeded; recording must never fail it
            why = f"{type(e).__name__}: {e}"
        if why and os.environ.get("TALLY_JIT_DEBUG"):
            print(f"tally-{tool}: the PTX was not recorded: {why}", file=sys.stderr)
    return done.returncode


def record(args: list[str]) -> Path | None:
    """Store the PTX -> cubin pair this command line made; None when it made none."""
    directory = os.environ.get(records.DIR_ENV)
    source, output = ptx_input(args), output_file(args)
    if not directory or source is None or output is None:
        return None
    cubin = Path(output).read_bytes()
    if cubin[:4] != b"\x7fELF":
        return None
    ptx = Path(source).read_text()
    return records.store(Path(directory), cubin, ptx, "ptxas", records.max_bytes())


def ptx_input(args: list[str]) -> str | None:
    """The PTX file on the command line: its one `*.ptx` path (Triton's), else its one
    input file that reads as PTX (XLA names a temporary file without a suffix)."""
    files = [a for a in args if not a.startswith("-") and a != output_file(args) and os.path.isfile(a)]
    named = [a for a in files if a.endswith(".ptx")]
    if named:
        return named[0] if len(named) == 1 else None
    found = [a for a in files if _reads_as_ptx(a)]
    return found[0] if len(found) == 1 else None


def _reads_as_ptx(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b".version" in head and b".target" in head


def output_file(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a in ("-o", "--output-file") and i + 1 < len(args):
            return args[i + 1]
        for prefix in ("--output-file=", "-o="):
            if a.startswith(prefix):
                return a[len(prefix):]
    return None


def real_ptxas() -> Path | None:
    named = os.environ.get(REAL_ENV)
    if named:
        return Path(named)
    triton = _triton_ptxas(os.getppid())
    if triton is not None:
        return triton
    return real_tool("ptxas", REAL_BESIDE, CUDA_PTXAS)


def real_tool(name: str, beside_name: str, fallback: Path) -> Path | None:
    """The toolkit program a wrapper stands in for: `beside_name` beside the name we run
    under, else `name` on PATH (never the wrapper itself), else `fallback`."""
    if sys.argv and sys.argv[0]:
        beside = Path(sys.argv[0]).parent / beside_name
        if beside.is_file():
            return beside
    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    for d in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which(name, path=d) if d else None
        if found and Path(found).resolve() != me:
            return Path(found)
    return fallback if fallback.is_file() else None


def _triton_ptxas(pid: int) -> Path | None:
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if path.endswith(TRITON_LIBRARY):
                    candidate = Path(path).parents[1] / "backends" / "nvidia" / "bin" / "ptxas"
                    return candidate if candidate.is_file() else None
    except OSError:
        pass
    return None


if __name__ == "__main__":
    sys.exit(main())
