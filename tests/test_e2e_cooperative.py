"""Cooperative launches and programmatic dependent launch end to end: CUDA C++
programs built by nvcc at test time, run under tally-run on the emulator at both
priorities.

- cooperative_launch.cu: the device says it can launch cooperatively; a grid of
  cooperative groups' grid.sync() rounds launched by cudaLaunchCooperativeKernel
  and by cudaLaunchKernelEx's cooperative attribute computes what the host does
  (so every block was resident at once and the grid barrier worked); the server
  ran those kernels whole, never sliced or preempted, also at best effort; a grid
  one block larger than the occupancy calculator allows fails with
  cudaErrorCooperativeLaunchTooLarge, says why, and the job goes on; captured into
  a graph, the launch replays cooperatively, also after new node parameters;
- cooperative_driver.c: the same through the driver API, also
  cuLaunchCooperativeKernelMultiDevice on the one device a job has (two devices
  and unknown flags refused);
- dependent_launch.cu: a secondary kernel launched with programmatic stream
  serialization, and one behind a programmatic event, see all of their primary's
  writes (griddepcontrol.wait / launch_dependents in their PTX).
"""
from __future__ import annotations

import pytest
from e2e_helpers import (CUDA_ERROR_INVALID_VALUE, build_cuda, build_device_code, build_driver_c,  # noqa: F401
                         emulator_server, finish, run_job, start_job)

SM90 = ("-gencode", "arch=compute_90,code=compute_90")
CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720      # cudaErrorCooperativeLaunchTooLarge has the same number


def scheduler_counters(server) -> dict:
    return server.status()["server"]["scheduler"]


def check_cooperative_job(job) -> None:
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("cooperative_attribute") == [1]
    assert job.ints("launch_wrong", "launch_ex_wrong", "after_wrong") == [0, 0, 0], job.stdout
    assert job.ints("graph_wrong", "updated_graph_wrong") == [0, 0], job.stdout
    assert job.ints("too_large", "last_error") == [CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE] * 2
    why = next((line for line in job.stderr.splitlines() if "COOPERATIVE_LAUNCH_TOO_LARGE" in line), "")
    assert "cannot all be resident at once" in why and "ring_rounds" in why, job.stderr


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_grid_sync_in_a_cooperative_launch(nvcc, emulator_server, priority):
    before = scheduler_counters(emulator_server)
    job = run_job(emulator_server.socket, build_cuda(nvcc, "cooperative_launch.cu", flags=SM90),
                  priority=priority)
    check_cooperative_job(job)
    after = scheduler_counters(emulator_server)
    assert after["kernels_cooperative"] - before["kernels_cooperative"] == 5, after
    # Whole, never transformed: no slice or PTB kernel started meanwhile (this job's
    # kernels are all cooperative).
    for counter in ("kernels_sliced", "kernels_ptb", "preemptions"):
        assert after[counter] == before[counter], (counter, before, after)
    log = emulator_server.process.log()
    assert "cooperative kernel" in log and "never sliced or preempted" in log


def test_a_cooperative_best_effort_job_next_to_a_high_priority_one(nvcc, emulator_server):
    # The best-effort job's cooperative kernels run whole while the high-priority job
    # runs its own; both finish right, and the refused launch harms neither.
    program = build_cuda(nvcc, "cooperative_launch.cu", flags=SM90)
    be = start_job(emulator_server.socket, program, 3, priority="best-effort")
    hp = start_job(emulator_server.socket, build_cuda(nvcc, "dependent_launch.cu", flags=SM90), priority="high")
    check_cooperative_job(finish(be))
    hp_job = finish(hp)
    assert hp_job.returncode == 0, hp_job.stdout + hp_job.stderr
    assert hp_job.ints("serialized_wrong", "event_wrong") == [0, 0]


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_programmatic_dependent_launch(nvcc, emulator_server, priority):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "dependent_launch.cu", flags=SM90), priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("serialized_wrong", "event_wrong") == [0, 0]


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_cooperative_launches_through_the_driver_api(nvcc, emulator_server, priority):
    ptx = build_device_code(nvcc, "cooperative_kernels.cu", "ptx", SM90)
    job = run_job(emulator_server.socket, build_driver_c("cooperative_driver.c"), ptx, priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("cooperative_attribute", "multi_device_attribute") == [1, 1]
    assert job.ints("launch_wrong", "multi_wrong", "multi_unsynchronized_wrong") == [0, 0, 0]
    assert job.ints("two_devices", "unknown_flags", "too_large", "multi_too_large") == [
        CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE]
    assert "a job under tally has one device" in job.stderr, job.stderr


def test_cooperative_launches_on_per_thread_default_streams(nvcc, emulator_server):
    # nvcc --default-stream per-thread: cudart calls cuLaunchCooperativeKernel_ptsz and
    # cuLaunchKernelEx_ptsz
    program = build_cuda(nvcc, "cooperative_launch.cu", flags=SM90 + ("--default-stream", "per-thread"))
    job = run_job(emulator_server.socket, program, env={"TALLY_CLIENT_TRACE": "1"})
    check_cooperative_job(job)
    for call in ("cuLaunchCooperativeKernel_ptsz -> 0", "cuLaunchKernelEx_ptsz -> 0",
                 "cuLaunchCooperativeKernel_ptsz -> 720"):
        assert f"tally-trace: {call}" in job.stderr, call
