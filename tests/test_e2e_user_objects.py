"""User objects (cudaUserObjectCreate, cudaGraphRetainUserObject...) under tally-run on
the emulator: references held by the job, by graphs (MOVE or new ones) and by their
instantiations; each destructor runs exactly once, after the last reference, on a
thread of the client's own, while the job's other CUDA calls go on."""
from __future__ import annotations

from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401


def test_user_objects_destroyed_once_after_the_last_reference(nvcc, emulator_server):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "user_objects.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("a_alive_in_graph", "a_destroyed", "a_other_thread", "a_saw_main_go_on") == [1, 1, 1, 1]
    assert job.ints("b_alive_while_exec", "b_destroyed", "launches") == [1, 1, 2]
    assert job.ints("c_alive_with_one", "release_unheld", "c_destroyed") == [1, 1, 1]  # 1: cudaErrorInvalidValue
    assert job.ints("e_alive_in_exec_of_clone", "e_destroyed_by_update") == [1, 1]
    assert job.ints("bad_flags", "zero_count", "no_destructor") == [1, 1, 1]
    assert job.value("done") == "1"
    assert "not supported" not in job.stderr
