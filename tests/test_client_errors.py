"""cuGetErrorName / cuGetErrorString: answered in the client from cuda.h's CUresult
list, with the driver's texts, without a server."""
from __future__ import annotations

import ctypes
import os
import re
import subprocess

import pytest
from client_helpers import CUDA_HOME, build_c, run_client

from tally.backends.registry import real_driver_present


def documented_codes() -> dict[int, str]:
    body = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;", (CUDA_HOME / "include" / "cuda.h").read_text(),
                     re.S).group(1)
    return {int(v): n for n, v in re.findall(r"^\s*(CUDA_\w+)\s*=\s*(\d+)", body, re.M)}


def test_names_and_descriptions():
    run = run_client(build_c("error_strings.c"), 0, 1, 801, 999, 12345, trace=False)
    assert run.returncode == 0, run.stderr
    codes = dict(line.split(" ", 1) for line in run.lines("code="))
    texts = dict(line.split(" ", 1) for line in run.lines("text="))
    assert codes["0"] == "0 CUDA_SUCCESS"
    assert codes["1"] == "0 CUDA_ERROR_INVALID_VALUE"
    assert codes["801"] == "0 CUDA_ERROR_NOT_SUPPORTED"
    assert codes["999"] == "0 CUDA_ERROR_UNKNOWN"
    # the driver's own texts, which programs compare (cuda-bindings' test_cuda.py)
    assert texts["0"] == "0 no error"
    assert texts["1"] == "0 invalid argument"
    assert texts["999"] == "0 unknown error"
    # Unknown values: CUDA_ERROR_INVALID_VALUE and a NULL string.
    assert codes["12345"] == "1 NULL" and texts["12345"] == "1 NULL"
    assert run.value("named") == str(len([c for c in documented_codes() if c <= 1000]))
    assert run.value("null_out") == "1"
    assert run.value("func_name_null") == run.value("kernel_name_null") == "1"   # CUDA_ERROR_INVALID_VALUE


def test_every_text_is_the_runtimes_for_the_same_number():
    # The toolkit's runtime carries the driver's texts for the numbers they share
    # (cudaGetErrorString needs no GPU); where it has none, cuda.h's documentation.
    runtime = ctypes.CDLL(str(CUDA_HOME / "lib64" / "libcudart.so"))
    runtime.cudaGetErrorString.restype = ctypes.c_char_p
    unknown = runtime.cudaGetErrorString(-1)
    codes = sorted(documented_codes())
    run = run_client(build_c("error_strings.c"), *codes, trace=False)
    assert run.returncode == 0, run.stderr
    texts = dict(line.split(" ", 1) for line in run.lines("text="))
    shared = [c for c in codes if runtime.cudaGetErrorString(c) != unknown]
    assert len(shared) >= 90
    for code in shared:
        assert texts[str(code)] == "0 " + runtime.cudaGetErrorString(code).decode(), code
    for code in set(codes) - set(shared):      # cuda.h's sentence, not nothing
        assert texts[str(code)].startswith("0 ") and len(texts[str(code)]) > 12, code


@pytest.mark.gpu
def test_every_text_is_the_real_drivers():
    # The same program against NVIDIA's driver (nothing of tally's on its library path)
    # and against tally's client: every code's name and text alike.
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    program = build_c("error_strings.c")
    codes = [str(c) for c in sorted(documented_codes())]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    native = subprocess.run([str(program), *codes], env=env, capture_output=True, text=True, timeout=60)
    assert native.returncode == 0, native.stderr
    ours = run_client(program, *codes, trace=False)
    assert ours.returncode == 0, ours.stderr
    lines = [line for line in native.stdout.splitlines() if line.startswith(("code=", "text="))]
    differ = [(line, mine) for line, mine in zip(lines, (x for x in ours.stdout.splitlines()
                                                         if x.startswith(("code=", "text=")))) if line != mine]
    assert not differ, "driver vs tally: " + "; ".join(f"{a!r} != {b!r}" for a, b in differ[:20])
