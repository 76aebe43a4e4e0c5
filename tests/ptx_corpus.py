"""The shared CUDA test corpus, compiled to PTX by nvcc and cached by content.

    from ptx_corpus import CORPUS_FILES, compile_ptx
    ptx = compile_ptx(CORPUS_DIR / "vector_add.cu", arch="sm_90", extra_flags=("-lineinfo",))

Each source in tests/cuda/corpus/ is a few self-contained kernels with a
comment per kernel giving its inputs, outputs and launch shape, so other tests
(emulator, passes) can check results against numpy.

Compiled PTX is cached under $TALLY_PTX_CACHE (default: <tmp>/tally-ptx-cache-<uid>),
keyed by a hash of the source text, its path, the arch, the flags and the nvcc
version, so a second test run does not call nvcc at all. Entries are written
atomically, so concurrent test processes can share the cache.
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

TESTS_DIR = Path(__file__).resolve().parent
CORPUS_DIR = TESTS_DIR / "cuda" / "corpus"
CORPUS_FILES: list[Path] = sorted(CORPUS_DIR.glob("*.cu"))
TRITON_DIR = TESTS_DIR / "data" / "triton"
TRITON_PTX: list[Path] = sorted(TRITON_DIR.glob("*.ptx"))
# Hand-written PTX covering syntax nvcc rarely emits (jump tables, prototypes, initializers).
HANDWRITTEN_PTX: list[Path] = sorted((TESTS_DIR / "data" / "ptx").glob("*.ptx"))

# Extra variants that stress the parser with debug output: full device debug info (-G:
# .section .debug_*, labels everywhere) for a few files with calls, loops, barriers, asm.
DEBUG_FILES = ["noinline_call.cu", "reduce_shared.cu", "inline_asm.cu", "printf_kernel.cu"]


class CorpusCompileError(RuntimeError):
    """nvcc failed on a corpus source; the message holds the command and nvcc's output."""


def cuda_tool(name: str) -> str:
    """Path of a CUDA toolkit binary ($CUDA_HOME/bin, else PATH)."""
    candidate = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: set CUDA_HOME to the CUDA toolkit "
                                f"(expected /usr/local/cuda/bin/{name})")
    return found


def cache_dir() -> Path:
    path = os.environ.get("TALLY_PTX_CACHE")
    if path:
        return Path(path)
    return Path(tempfile.gettempdir()) / f"tally-ptx-cache-{os.getuid()}"


@functools.lru_cache(maxsize=1)
def _nvcc_version() -> str:
    return subprocess.run([cuda_tool("nvcc"), "--version"], capture_output=True, text=True,
                          check=True).stdout


def _cache_key(source: Path, arch: str, flags: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for part in (str(source.resolve()), source.read_text(), arch, "\0".join(flags), _nvcc_version()):
        h.update(part.encode())
        h.update(b"\0\0")
    return h.hexdigest()[:32]


def compile_ptx(source_path: str | Path, arch: str = "sm_80", extra_flags: Iterable[str] = ()) -> str:
    """PTX text of `nvcc -ptx -arch=<arch> <extra_flags> source`, from the cache when possible."""
    source = Path(source_path)
    flags = tuple(extra_flags)
    cached = cache_dir() / f"{source.stem}.{arch}.{_cache_key(source, arch, flags)}.ptx"
    if cached.exists():
        return cached.read_text()
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        out = Path(tmp) / "out.ptx"
        cmd = [cuda_tool("nvcc"), "-ptx", f"-arch={arch}", *flags, str(source), "-o", str(out)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise CorpusCompileError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr}")
        os.replace(out, cached)
    return cached.read_text()


def compile_source_ptx(name: str, source: str, arch: str) -> str:
    """PTX of CUDA source text a test holds, kept at a stable path (`name` in the cache
    directory) so the compile cache, keyed by path and text, hits on the next run."""
    path = cache_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)   # atomic: concurrent test processes never read half a file
    return compile_ptx(path, arch=arch)


def compile_many(requests: Iterable[tuple[Path, str, tuple[str, ...]]], jobs: int | None = None) -> None:
    """Fill the cache for (source, arch, flags) requests in parallel (one nvcc per core)."""
    requests = list(requests)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        for future in [pool.submit(compile_ptx, s, a, f) for s, a, f in requests]:
            future.result()


def corpus_variants() -> list[tuple[Path, str, tuple[str, ...]]]:
    """Every (source, arch, flags) the round-trip tests use: each file for sm_80 and sm_90,
    with and without -lineinfo, plus -G for DEBUG_FILES."""
    out = []
    for source in CORPUS_FILES:
        for arch in ("sm_80", "sm_90"):
            out.append((source, arch, ()))
            out.append((source, arch, ("-lineinfo",)))
        if source.name in DEBUG_FILES:
            out.append((source, "sm_80", ("-G",)))
    return out
