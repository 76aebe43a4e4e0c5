"""The device-fault scenario on a cuda-backend server, shared by the nested test
(tests/test_cuda_backend_faults.py, tally's own driver under the cuda backend) and
the GPU test (tests/test_e2e_gpu_faults.py): a high-priority job computes and
waits; a best-effort job writes through a wild pointer; the server names the
best-effort job as the cause, fails both (one context holds every job's state),
recreates its context and runs the next jobs correctly."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from e2e_helpers import CUDA_ERROR_ILLEGAL_ADDRESS, build_cuda, finish, run_job, start_job

FAULT = str(CUDA_ERROR_ILLEGAL_ADDRESS)
# tally-bench gpu-check names a file here to get the scenario's figures (what each job saw,
# the recovery time); the checks are the same with or without it.
RECORD_ENV = "TALLY_FAULT_RECORD"


def explanations(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tally: ")]


def check_fault_recovery(nvcc, server) -> None:
    """The scenario, on a cuda-backend server `server` (tests/e2e_helpers.py: Server)."""
    hp = start_job(server.socket, build_cuda(nvcc, "fault_bystander.cu"), priority="high")
    assert hp.stdout.readline().split() == ["ready", "good=4096"]
    hp_id = server.wait_for(lambda s: len(s["clients"]) == 1, what="the high-priority job")["clients"][0]["client_id"]

    struck = time.monotonic()
    be = run_job(server.socket, build_cuda(nvcc, "illegal_address.cu"), priority="best-effort", timeout=300)
    assert be.returncode == 0, be.stdout + be.stderr
    assert be.ints("malloc", "launch") == [0, 0] and be.value("sync") == FAULT
    status = server.wait_for(lambda s: (s["server"]["last_device_fault"] or {}).get("state") == "recovered",
                             timeout=120, what="the recovery from the device fault")
    noticed_s = time.monotonic() - struck
    fault = status["server"]["last_device_fault"]
    assert status["server"]["device_faults"] == 1
    assert (fault["code"], fault["error"]) == (CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS")
    [be_id] = fault["caused_by"]
    assert be_id != hp_id and fault["jobs_failed"] == sorted([hp_id, be_id])
    assert fault["recovery_s"] is not None and fault["recovery_s"] < 60
    shown = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "status", "--socket", str(server.socket)],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert (f"faults   1 device faults; last: CUDA_ERROR_ILLEGAL_ADDRESS, caused by client {be_id}, 2 jobs failed, "
            f"context recovered") in shown, shown

    # The job that faulted is named, with its pid, program and priority, in what each job is told.
    [told_be] = explanations(be.stderr)
    cause = re.search(r"device fault: a kernel of client (\d+) \(pid \d+, (\S+), best-effort\) failed with "
                      r"CUDA_ERROR_ILLEGAL_ADDRESS", told_be)
    assert cause is not None and int(cause[1]) == be_id and cause[2].startswith("illegal_address"), told_be
    assert "every job's device memory, modules, streams and events, this job's included, are lost" in told_be

    # The high-priority job's state went with the context: every call fails with the fault.
    [hp_status] = status["clients"]
    assert (hp_status["client_id"], hp_status["state"], hp_status["memory_used"]) == (hp_id, "faulted", 0)
    hp.stdin.write("go\n")
    hp.stdin.flush()
    bystander = finish(hp, timeout=120)
    assert bystander.returncode == 0, bystander.stdout + bystander.stderr
    assert bystander.ints("after_copy", "after_sync", "after_malloc") == [CUDA_ERROR_ILLEGAL_ADDRESS] * 3
    [told_hp] = explanations(bystander.stderr)
    assert f"device fault: a kernel of client {be_id} (pid " in told_hp and "best-effort) failed with" in told_hp

    # The server goes on with a fresh context: the next jobs run correctly, a
    # high-priority one included (the faulted one no longer counts as attached).
    after = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 5000, priority="high", timeout=300)
    assert after.returncode == 0 and after.ints("wrong", "roundtrip") == [0, 5000], after.stdout + after.stderr
    status = server.wait_for(lambda s: not s["clients"], what="every job to leave")
    assert status["server"]["device_faults"] == 1
    log = server.process.log()
    assert f"device fault: a kernel of client {be_id} (" in log
    assert "device context recreated" in log
    _record({"recovery_s": fault["recovery_s"], "be_start_to_recovered_s": round(noticed_s, 3),
             "error": fault["error"], "jobs_failed": len(fault["jobs_failed"]),
             "best_effort_saw": {"sync": be.value("sync"), "told": told_be},
             "high_priority_saw": {"after_copy_sync_malloc": bystander.ints("after_copy", "after_sync", "after_malloc"),
                                   "told": told_hp},
             "next_job": {"wrong": after.ints("wrong")[0], "roundtrips": after.ints("roundtrip")[0]}})


def _record(figures: dict) -> None:
    path = os.environ.get(RECORD_ENV)
    if path:
        Path(path).write_text(json.dumps(figures, indent=1) + "\n")
