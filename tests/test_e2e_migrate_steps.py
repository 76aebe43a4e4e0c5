"""Where a migration's time goes, as status reports it (tally/server/step_clock.py):
the source's steps add up to the migration's time, the target names its own,
and the job (tally-bench migrate's, incompressible bytes, a kernel and a global)
finishes exact on the target after working through its move."""
from __future__ import annotations

import subprocess
import sys

import pytest
from e2e_helpers import finish, start_job, two_servers

from tally.bench.process_jobs import build_cuda_job

SOURCE_STEPS = ["connect", "offer", "hold", "quiesce", "transfer", "commit", "release"]


def test_steps_add_up_and_the_job_is_exact(nvcc, two_servers):
    a, b = two_servers
    job = start_job(a.socket, build_cuda_job("resident_memory.cu", nvcc), "24")
    assert job.stdout.readline().strip() == "ready"
    job.stdin.write("probe\n")
    job.stdin.flush()
    assert job.stdout.readline().strip() == "probing"          # it keeps working while it moves
    (client,) = a.status()["clients"]
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "migrate", "--client",
                        str(client["client_id"]), "--to", str(b.socket), "--socket", str(a.socket)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    record = a.status()["server"]["mobility"]
    steps = record["last_migration_steps_ms"]
    assert list(steps) == SOURCE_STEPS
    assert sum(steps.values()) == pytest.approx(record["last_migration_ms"], rel=0.02, abs=1.0)
    imported = b.status()["server"]["mobility"]["last_import_steps_ms"]
    assert {"receive", "alloc", "bytes", "module", "commit"} <= set(imported)
    job.stdin.write("stop\n")
    job.stdin.flush()
    assert job.stdout.readline().startswith("longest_call_ms=")
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0 and "wrong=0" in result.stdout, result.stdout + result.stderr
