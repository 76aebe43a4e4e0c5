"""cuGetErrorName / cuGetErrorString: answered in the client from cuda.h's CUresult
list, without a server."""
from __future__ import annotations

import re

from client_helpers import CUDA_HOME, build_c, run_client


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
    # the driver's own text for success, which programs compare (cuda-bindings' test_cuda.py)
    assert texts["0"] == "0 no error"
    assert texts["1"].startswith("0 This indicates that one or more of the parameters passed to the API call")
    assert texts["999"] == "0 This indicates that an unknown internal error has occurred."
    # Unknown values: CUDA_ERROR_INVALID_VALUE and a NULL string.
    assert codes["12345"] == "1 NULL" and texts["12345"] == "1 NULL"
    assert run.value("named") == str(len([c for c in documented_codes() if c <= 1000]))
    assert run.value("null_out") == "1"
    assert run.value("func_name_null") == run.value("kernel_name_null") == "1"   # CUDA_ERROR_INVALID_VALUE
