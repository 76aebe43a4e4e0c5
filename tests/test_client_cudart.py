"""cudart 13 (static, nvcc's default, and shared) initializes on our libcuda.so.1:
it finds every entry point through our cuGetProcAddress, accepts our private export
tables (the integrity check included) and allocates device memory through the server."""
from __future__ import annotations

import re

import pytest

from tally.backends.null import NullBackend
from client_helpers import build_cu, run_client, shared_null_server  # noqa: F401 (fixture)

CUDA_ERROR_NO_DEVICE = 100
CUDART_INTEGRITY_FAILURE = 103  # cudaErrorSoftwareValidityNotEstablished


@pytest.mark.parametrize("shared", [False, True], ids=["static-cudart", "shared-cudart"])
def test_cudart_initializes_through_our_table(nvcc, shared, shared_null_server):
    prog = build_cu("cudart_init.cu", nvcc, shared)
    run = run_client(prog, server=shared_null_server.socket)
    assert run.returncode == 0, run.stderr
    described = NullBackend().describe()
    assert run.value("driver") == "13000 runtime=13000"
    assert run.value("count_rc") == "0 count=1"
    assert run.value("props_rc") == "0 name=%s cc=%d.%d sms=%d" % (
        described.name, *described.compute_capability, described.sm_count)
    # cudaMalloc passes the integrity check and reaches the server.
    assert run.value("malloc_rc") == "0 name=cudaSuccess"
    trace = run.trace
    lookups = re.findall(r"^tally-trace: cuGetProcAddress (\S+) (\d+) flags=(\d+) -> (\S+)", trace, re.M)
    assert len(lookups) > 400 and len({name for name, *_ in lookups}) > 300
    assert ("cuMemAlloc", "3020", "0", "cuMemAlloc_v2") in lookups
    assert any(flags == "2" and symbol.endswith(("_ptsz", "_ptds")) for _, _, flags, symbol in lookups)
    for version in ("13000", "13001"):
        assert re.search(rf"^tally-trace: integrity check {version} at \d+: fixed answer$", trace, re.M)
    assert re.search(r"^tally-trace: integrity check 13002 at \d+: hash over 1 device\(s\)$", trace, re.M)
    assert re.search(r"^tally-trace: cuMemAlloc_v2 -> 0$", trace, re.M)
    assert "not supported" not in run.stderr


@pytest.mark.parametrize("shared", [False, True], ids=["static-cudart", "shared-cudart"])
def test_cudart_without_a_server_reports_no_device(nvcc, shared):
    run = run_client(build_cu("cudart_init.cu", nvcc, shared), server="/nonexistent/tally-test/s.sock")
    assert run.returncode == 0, run.stderr
    assert run.value("count_rc").split()[0] == str(CUDA_ERROR_NO_DEVICE)
    lines = [line for line in run.stderr.splitlines() if line.startswith("tally: ")]
    assert len(lines) == 1 and "no tally-server answers" in lines[0]
