"""Interprocess handles between jobs of one tally-server (emulator): a job opens
another's allocation and interprocess event, waits on the event, reads what the
owner wrote and writes back; what it must not do fails with INVALID_VALUE; memory
an owner frees while another job holds it stays valid for that job and is given
back when the last holder closes it."""
from __future__ import annotations

from e2e_helpers import (
    CUDA_ERROR_INVALID_VALUE,
    build_driver_c,
    finish,
    idle,
    run_job,
    server,  # noqa: F401  (fixture)
    start_job,
    tell,
)


def handles(owner) -> dict:
    got = {}
    while len(got) < 4:
        line = owner.stdout.readline().strip()
        assert line, "the owner stopped before printing its handles"
        key, _, value = line.partition("=")
        got[key] = value
    return got


def test_open_wait_read_write_and_what_is_refused(server):
    program = build_driver_c("ipc.c")
    owner = start_job(server.socket, program, "owner")
    h = handles(owner)
    assert h["timed_event_handle"] == "1"              # a timing event cannot be exported
    assert h["open_own"] == str(CUDA_ERROR_INVALID_VALUE)
    importer = run_job(server.socket, program, "importer", h["mem_handle"], h["event_handle"])
    assert importer.returncode == 0, importer.stdout + importer.stderr
    assert importer.value("read_after_event") == "1"   # waited for the owner's second fill
    for refused in ("free_others", "open_forged", "copy_after_close", "close_twice"):
        assert importer.value(refused) == str(CUDA_ERROR_INVALID_VALUE), refused
    tell(owner, "check")
    assert owner.stdout.readline().strip() == "written_by_other=33333333"
    tell(owner, "exit")
    result = finish(owner)
    assert result.returncode == 0, result.stdout + result.stderr
    server.wait_for(idle, what="both jobs' memory to be given back")


def test_memory_freed_by_its_owner_lives_until_the_last_holder_closes_it(server):
    program = build_driver_c("ipc.c")
    owner = start_job(server.socket, program, "owner")
    h = handles(owner)
    holder = start_job(server.socket, program, "holder", h["mem_handle"])
    assert holder.stdout.readline().strip() == "held_first=22222222"
    tell(owner, "free")
    assert owner.stdout.readline().strip() == "written_by_other=22222222"
    assert owner.stdout.readline().strip() == "freed=1"
    tell(owner, "exit")
    assert finish(owner).returncode == 0
    status = server.status()
    assert status["server"]["memory_free"] < status["server"]["memory_total"]   # the holder keeps it
    tell(holder, "again")
    result = finish(holder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("held_after_owner_freed") == "22222222"
    assert result.value("closed") == "1"
    server.wait_for(idle, what="the memory to be freed at the last close")
