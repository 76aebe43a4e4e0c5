"""A job killed between creating a pinned-memory object and the server opening
it leaves the object's name in /dev/shm; once the server lets the dead job go it
removes that job's names (`tally-bench chaos` found one left in 100 rounds), and
never those of a job that still runs."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from tally.server.segments import process_gone, reclaim_job_objects


def _names(tmp_path, pid: int) -> list[str]:
    names = [f"tally-pin-{pid}-1", f"tally-pin-{pid}-2", f"tally-pin-{pid}0-1", f"tally-{pid}-1"]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    return names


def test_the_names_of_a_job_that_died_go_and_no_others(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while not process_gone(child.pid):            # exited; a zombie until reaped below
        assert time.monotonic() < deadline
        time.sleep(0.01)
    names = _names(tmp_path, child.pid)
    assert reclaim_job_objects(child.pid, tmp_path) == sorted(names[:2])
    # another pid's object (same digits, longer) and the server's own segment name stay
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:])
    child.wait()
    assert process_gone(child.pid)


def test_a_running_jobs_names_stay(tmp_path):
    names = _names(tmp_path, os.getpid())
    assert not process_gone(os.getpid())
    assert reclaim_job_objects(os.getpid(), tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == sorted(names)
