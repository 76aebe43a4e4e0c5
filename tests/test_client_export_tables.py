"""Every private export table tally hands cudart is padded past the slots any
measured cudart calls: an unknown slot is a function that logs once and answers
CUDA_SUCCESS, never a null or out-of-bounds pointer. cudart 13.2 (PyTorch 2.15's)
calls runtime-interface slot 12, which CUDA 13.0's cudart never did; before the
padding that call jumped to the next table's size field and crashed the job."""
from __future__ import annotations

from client_helpers import build_c, run_client

SLOTS = 64       # cudart 13.5 calls slot 51 of the tools context table
TABLES = {"runtime_interface": 9, "tools_runtime_hooks": 7, "tools_tls": 1, "context_local_storage": 3,
          "context_checks": 4, "integrity_check": 2, "tools_context": 1, "fft_kernels": 1}


def test_unknown_slots_answer_success_and_log_once_each():
    run = run_client(build_c("export_tables.c"), trace=False)
    assert run.returncode == 0, run.stderr
    assert not run.lines("missing")
    sized = {name: int(size) for name, size in (line.split() for line in run.lines("size"))}
    assert sized == {name: SLOTS * 8 for name in TABLES if name != "context_local_storage"}
    called = [line.split() for line in run.lines("slot")]
    assert len(called) == sum(SLOTS - first for first in TABLES.values())
    assert {result for _, _, result in called} == {"0"}
    logged = [line for line in run.stderr.splitlines() if "export table" in line]
    # Runtime-interface slot 12 is known (cudart 13.2 calls it at every start) and silent.
    assert len(logged) == len(called) - 1, "each unknown slot logs exactly once"
    assert not [line for line in logged if "slot 12 of the runtime interface" in line]
    assert ("tally: a library called slot 13 of the runtime interface export table, which tally does not "
            "implement (arguments 0x1 0x2 0x3); answering CUDA_SUCCESS") in logged
