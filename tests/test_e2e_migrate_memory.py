"""Migrating a job whose memory is virtual (reservations, physical chunks, one
released while mapped), pinned (one buffer kernels write at its host address,
one copies go through) and managed, with timed events
(tally/server/migration_memory.py, tally/server/client/event_clock.py): an
nvcc-compiled job moves A -> B while it waits and finishes there with every
byte exact; the event recorded before the move times the one recorded after it
within the host's own bounds, and two events recorded before it keep their
elapsed time. A keeps nothing: its device memory is back to what it was, and
no shared-memory name of the job is left."""
from __future__ import annotations

import os

from e2e_helpers import build_cuda, finish, idle, migrate, start_job, two_servers

from tally import paths

GRANULARITY = 2 << 20


def job_names(pid: int) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"tally-pin-{pid}-"))


def test_virtual_pinned_managed_memory_and_events_move_exactly(nvcc, two_servers):
    a, b = two_servers
    program = build_cuda(nvcc, "moving_memory.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))
    free_a = a.status()["server"]["memory_free"]
    job = start_job(a.socket, program)
    assert job.stdout.readline().strip() == "ready", job.stderr.read() if job.poll() is not None else ""
    (on_a,) = a.status()["clients"]
    # Two chunks of physical memory, the managed buffer and the device buffer.
    assert on_a["memory_used"] >= 2 * GRANULARITY + 2 * (1 << 18)
    r = migrate(a, on_a["client_id"], b.socket)
    assert r.returncode == 0 and "migrated to" in r.stdout, r.stdout + r.stderr
    status = a.wait_for(idle, what="A to free the migrated job's memory")
    assert status["server"]["memory_free"] == free_a
    (on_b,) = b.status()["clients"]
    assert (on_b["pid"], on_b["memory_used"]) == (on_a["pid"], on_a["memory_used"])
    assert job_names(on_a["pid"]) == []
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong_vmm", "wrong_pinned", "wrong_mapped", "wrong_managed") == [0, 0, 0, 0]
    values = {k: float(result.value(k)) for k in ("before_ms", "carried_ms", "across_ms", "inner_ms", "outer_ms")}
    assert values["carried_ms"] == values["before_ms"] > 0
    # The emulator's events and the job's host clock are both CLOCK_MONOTONIC (printed to 1 us).
    assert values["inner_ms"] - 0.002 <= values["across_ms"] <= values["outer_ms"] + 0.002, values
    b.wait_for(idle, what="the job's release on B")
    assert job_names(on_a["pid"]) == []


def test_migrated_back_and_forth_twice(nvcc, two_servers):
    """A -> B -> A: B's addresses for the job's reservation are A's again, and the
    carried events survive two moves."""
    a, b = two_servers
    program = build_cuda(nvcc, "moving_memory.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))
    job = start_job(a.socket, program)
    assert job.stdout.readline().strip() == "ready"
    (on_a,) = a.status()["clients"]
    r = migrate(a, on_a["client_id"], b.socket)
    assert r.returncode == 0, r.stdout + r.stderr
    a.wait_for(idle, what="A to free the job")
    r = migrate(b, b.status()["clients"][0]["client_id"], a.socket)
    assert r.returncode == 0, r.stdout + r.stderr
    b.wait_for(idle, what="B to free the job")
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong_vmm", "wrong_pinned", "wrong_mapped", "wrong_managed") == [0, 0, 0, 0]
    assert float(result.value("carried_ms")) == float(result.value("before_ms"))
    a.wait_for(idle, what="the job's release on A")
    assert job_names(on_a["pid"]) == []
