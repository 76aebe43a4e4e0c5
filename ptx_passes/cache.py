"""Content-addressed on-disk cache of transformed modules, so a job restarted with
the same kernels pays nothing for the passes.

Key: sha256 over the input PTX text, the names and VERSIONs of the passes
applied, and the toolkit's version (package version plus a digest of the
toolkit's own source files, so editing a pass or the printer invalidates old
entries even before anyone bumps a VERSION).

One file per entry, `<dir>/<key[:2]>/<key>.ptxv`: a JSON header line (format,
key, the output's sha256 and length, the report) followed by the output PTX
bytes. Writes go to a temporary file in the same directory and are renamed
into place, so readers see a whole entry or none. An entry that does not
check out (truncated, wrong key, wrong checksum, not JSON) is treated as a
miss; the caller rebuilds it and the rewrite replaces it.

Directory: $TALLY_CACHE_DIR, else $XDG_CACHE_HOME/tally/ptx, else
~/.cache/tally/ptx (or the `directory` given to TransformCache, for tests).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

FORMAT = 1
_SUFFIX = ".ptxv"
_log = logging.getLogger(__name__)


def default_directory() -> Path:
    explicit = os.environ.get("TALLY_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "tally" / "ptx"


@functools.lru_cache(maxsize=1)
def tool_version() -> str:
    """Package version + a digest of the toolkit's Python sources."""
    try:
        from importlib.metadata import version
        package = version("tally")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        package = "unknown"
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"{package}+{digest.hexdigest()[:16]}"


def cache_key(ptx_text: str, pass_versions: dict[str, int]) -> str:
    h = hashlib.sha256()
    h.update(f"tally-ptx-cache/{FORMAT}\0{tool_version()}\0".encode())
    for name in sorted(pass_versions):
        h.update(f"{name}={pass_versions[name]}\0".encode())
    h.update(b"\0")
    h.update(ptx_text.encode())
    return h.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    ptx: str
    report: dict


class TransformCache:
    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else default_directory()

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}{_SUFFIX}"

    def load(self, key: str) -> CacheEntry | None:
        """The entry for `key`, or None if there is none or it does not check out."""
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None
        newline = data.find(b"\n")
        try:
            header = json.loads(data[:newline])
            body = data[newline + 1:]
            if (newline < 0 or header["format"] != FORMAT or header["key"] != key
                    or header["ptx_bytes"] != len(body)
                    or header["ptx_sha256"] != hashlib.sha256(body).hexdigest()):
                raise ValueError("header does not match the entry")
            return CacheEntry(body.decode("utf-8"), header["report"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            _log.warning("ignoring damaged PTX cache entry %s (%s); it will be rebuilt",
                         self.path(key), exc)
            return None

    def store(self, key: str, ptx: str, report: dict) -> None:
        """Write the entry atomically. A cache that cannot be written is only logged:
        the caller has its result either way."""
        body = ptx.encode("utf-8")
        header = {"format": FORMAT, "key": key, "ptx_bytes": len(body),
                  "ptx_sha256": hashlib.sha256(body).hexdigest(), "report": report}
        target = self.path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=target.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
                    f.write(body)
                os.replace(tmp, target)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            _log.warning("cannot write PTX cache entry %s: %s (set TALLY_CACHE_DIR to a "
                         "writable directory)", target, exc)
