"""The CUTLASS/CuTe headers of the PyPI package nvidia-cutlass, for tests that build
CUTLASS programs. The package is not a dependency of tally's tests: its own
requirements pin a cuda-python that would change the suite's cuda-bindings. So the
wheel is downloaded alone (`pip download --no-deps`, 6 MB) and its
cutlass_library/source/include tree, with tools/util/include (the helpers CUTLASS's
conv collectives include, e.g. cutlass/util/packed_stride.hpp) merged in, extracted
once into the test cache; TALLY_CUTLASS_INCLUDE names another include directory instead."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ptx_corpus import cache_dir

CUTLASS = "nvidia-cutlass==4.2.0.0"
_PREFIXES = ("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/")
_MARKERS = (Path("cute") / "tensor.hpp", Path("cutlass") / "util" / "packed_stride.hpp")


def cutlass_include_dir() -> Path:
    given = os.environ.get("TALLY_CUTLASS_INCLUDE")
    if given:
        return Path(given)
    target = cache_dir() / f"cutlass-{CUTLASS.split('==')[1]}-util" / "include"
    if all((target / m).exists() for m in _MARKERS):
        return target
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", CUTLASS,
                        "-d", tmp], check=True, capture_output=True, text=True, timeout=600)
        (wheel,) = Path(tmp).glob("*.whl")
        staging = Path(tmp) / "include"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                prefix = next((p for p in _PREFIXES if name.startswith(p)), None)
                if prefix is not None and not name.endswith("/"):
                    out = staging / name[len(prefix):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(name))
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staging, target)     # atomic: concurrent test processes see all of it or none
        except OSError:
            if not all((target / m).exists() for m in _MARKERS):
                raise
    return target
