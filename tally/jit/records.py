"""The per-user cache of JIT-captured PTX: one record file per cubin.

A record is found by the cubin's bytes alone, so the key is something the C++
client computes cheaply at every cubin load: FNV-1a (64 bit) of the cubin and its
size, in the file name `<fnv 16 hex>-<size hex>.rec`. The key only finds the
record; the server trusts it after checking the SHA-256 written inside and the
kernels themselves (ptx_match.py), so a key collision or an edited file falls back
to the cubin. client_preload/src/jit_capture/jit_records.cpp computes the same name
(and writes records of its own: the cubins NVRTC and nvJitLink make, nvrtc_capture.cpp and
nvjitlink_capture.cpp).

File layout (text header, then the PTX as the compiler wrote it):

    tally-jit-ptx 1
    cubin-sha256 <64 hex>
    producer <what assembled it: ptxas, ...>
    <empty line>
    <PTX>

The cache is bounded (TALLY_JIT_CACHE_MAX_BYTES, default 256 MiB): after each new
record the oldest ones (by modification time; the client touches a record it
uses) are removed until the rest fit.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"tally-jit-ptx 1\n"
DIR_ENV = "TALLY_JIT_CAPTURE_DIR"          # set by tally-run; unset: no capture, no lookup
MAX_BYTES_ENV = "TALLY_JIT_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 256 << 20
MAX_RECORD_BYTES = 64 << 20                # the client sends no bigger record (jit_records.cpp)

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


class RecordError(ValueError):
    """A record file that is not one this version wrote (the message says what is wrong)."""


@dataclass(frozen=True)
class Record:
    cubin_sha256: str
    producer: str
    ptx: str


def default_dir() -> Path:
    # imported here: Triton's cache hook loads this file alone, in a job's interpreter
    # that may not have tally (tally/jit/triton_hook/)
    from tally import paths
    return paths.cache_dir() / "jit-ptx"


def fnv1a64(data: bytes) -> int:
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return h


def record_name(cubin: bytes) -> str:
    return f"{fnv1a64(cubin):016x}-{len(cubin):x}.rec"


def encode(cubin: bytes, ptx: str, producer: str) -> bytes:
    header = (f"cubin-sha256 {hashlib.sha256(cubin).hexdigest()}\n"
              f"producer {producer}\n\n").encode()
    return MAGIC + header + ptx.encode()


def decode(data: bytes) -> Record:
    if not data.startswith(MAGIC):
        raise RecordError(f"not a JIT-capture record (it starts with {bytes(data[:16])!r}, "
                          f"not {MAGIC!r})")
    head, sep, ptx = bytes(data[len(MAGIC):]).partition(b"\n\n")
    if not sep:
        raise RecordError("the record's header has no end (an empty line before the PTX)")
    fields = {}
    for line in head.decode(errors="replace").splitlines():
        key, _, value = line.partition(" ")
        fields[key] = value
    sha = fields.get("cubin-sha256", "")
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise RecordError(f"the record names no cubin SHA-256 (cubin-sha256 {sha!r})")
    try:
        text = ptx.rstrip(b"\0").decode()
    except UnicodeDecodeError as e:
        raise RecordError(f"the record's PTX is not UTF-8 text ({e})") from None
    return Record(sha, fields.get("producer", "?"), text)


def max_bytes(env: dict | None = None) -> int:
    text = (os.environ if env is None else env).get(MAX_BYTES_ENV, "")
    try:
        return int(text) if text else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


def store(directory: Path, cubin: bytes, ptx: str, producer: str, limit: int) -> Path | None:
    """Write the record of `cubin`, then trim the cache to `limit` bytes. None when
    the record alone is over the limit (nothing is written)."""
    data = encode(cubin, ptx, producer)
    if len(data) > min(limit, MAX_RECORD_BYTES):
        return None
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / record_name(cubin)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)          # concurrent assemblers never see half a record
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    trim(directory, limit, keep=target)
    return target


def trim(directory: Path, limit: int, keep: Path | None = None) -> int:
    """Remove the oldest records until the rest take at most `limit` bytes; how many went."""
    found = []
    for entry in os.scandir(directory):
        if entry.name.endswith(".rec") and entry.is_file(follow_symlinks=False):
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue                 # another assembler's trim took it
            found.append((st.st_mtime_ns, entry.name, st.st_size))
    total = sum(size for _, _, size in found)
    removed = 0
    for _, name, size in sorted(found):
        if total <= limit:
            break
        if keep is not None and name == keep.name:
            continue
        try:
            (directory / name).unlink()
            removed += 1
        except FileNotFoundError:
            pass
        total -= size
    return removed


def lookup(directory: Path, cubin: bytes) -> bytes | None:
    """The raw record of `cubin`, as the client finds it (tests use it)."""
    try:
        return (directory / record_name(cubin)).read_bytes()
    except FileNotFoundError:
        return None
