"""Triton's cache, under tally-run: kernels Triton finds already compiled keep their PTX.

tally-ptxas records the PTX of every cubin Triton assembles while a job runs under
tally-run. A kernel Triton compiled earlier, without tally-run, is not assembled
again: Triton loads its cubin from its cache (TRITON_CACHE_DIR, ~/.triton/cache),
where the PTX it was made from lies beside it. Triton takes its cache manager from
TRITON_CACHE_MANAGER ("module:Class", its documented hook); tally-run names this
module's CapturingCacheManager there (unless the job named its own) and puts this
folder on PYTHONPATH. It is Triton's own file cache in every respect but one: when a
cached kernel's files are looked up, the cubin and the PTX beside it become a record
of tally's JIT-capture cache (tally/jit/records.py, keyed by the cubin), unless one is
there already. The server checks a record against its cubin before using it, as it
does tally-ptxas's.

This file runs in the job's interpreter, which need not have tally installed: it
loads records.py from tally's tree by its path, and it never fails Triton's lookup
(a record it cannot write is left out).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PRODUCER = "triton-cache"
_RECORDS_FILE = Path(__file__).resolve().parent.parent / "records.py"
_records_module = None


def _records():
    global _records_module
    if _records_module is None:
        spec = importlib.util.spec_from_file_location("_tally_jit_records", _RECORDS_FILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module          # its dataclasses look their module up there
        spec.loader.exec_module(module)
        _records_module = module
    return _records_module


def adopt(group: dict) -> Path | None:
    """Records the PTX of each cubin in a cached kernel's files (Triton's group:
    file name -> path), where the PTX of the same name lies beside it and no record
    exists yet. Returns the last record written; None when nothing was written."""
    written = None
    try:
        records = _records()
        directory = os.environ.get(records.DIR_ENV)
        if not directory:
            return None                 # capture is off (tally-run --no-jit-capture)
        for name, path in group.items():
            if not name.endswith(".cubin"):
                continue
            ptx_path = group.get(name[:-len(".cubin")] + ".ptx")
            if ptx_path is None:
                continue
            cubin = Path(path).read_bytes()
            if (Path(directory) / records.record_name(cubin)).exists():
                continue
            ptx = Path(ptx_path).read_text()
            written = records.store(Path(directory), cubin, ptx, PRODUCER, records.max_bytes()) or written
    except Exception:                   # noqa: BLE001 (whatever it is, Triton's lookup must not fail of it)
        pass                            # a record is an extra; Triton's lookup goes on without it
    return written


try:
    from triton.runtime.cache import FileCacheManager
except ImportError:                     # imported outside a Triton process (tally's tests)
    FileCacheManager = None

if FileCacheManager is not None:
    class CapturingCacheManager(FileCacheManager):
        """Triton's FileCacheManager that records the PTX of the cached kernels it finds."""

        def get_group(self, filename: str):
            group = super().get_group(filename)
            if group:
                adopt(group)
            return group
