"""Conditional graph nodes (tests/cuda/programs/graph_conditional.cu): a WHILE loop
whose count a kernel decides from device memory that changes between replays, a
SWITCH choosing one of three bodies (one filled by stream capture into it),
a WHILE added to a graph while it is being captured (cudaStreamGetCaptureInfo,
cudaStreamUpdateCaptureDependencies), an IF with an else body holding a nested WHILE
with a handle of its own, and default values assigned at each launch; what CUDA
refuses (a handle of another graph, a WHILE with two bodies, such a graph as a
child or cloned) is refused here. Under tally-run on the emulator at both
priorities; the client replays such a graph (one message per operation, a round
trip per condition), so the server counts no graph launch for it."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, idle, run_job, server  # noqa: F401

REPLAYS = 4
CUDA_ERROR_INVALID_VALUE = 1


def check_conditional_job(job) -> None:
    assert job.returncode == 0 and "done" in job.stdout, job.stdout + job.stderr
    assert job.ints("replays_ok", "captured_into_body") == [1, 1]
    # the loop ran 1, 3, 5, 7 times and the SWITCH took body count % 3 each time
    for r in range(REPLAYS):
        want = 1 + 2 * r
        assert f"replay{r} count={want} chosen={100 * (want % 3 + 1)} flag=2 bumps=3 trace_ok=1" in job.stdout
    # a WHILE added to a graph under capture, its body captured into: 6 -> 0, then the end mark
    assert job.ints("captured_while_left", "captured_end") == [0, 40]
    assert job.ints("foreign_handle", "while_of_two", "as_child", "clone") == [CUDA_ERROR_INVALID_VALUE] * 4


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_conditional_nodes_choose_and_loop_on_device_values(nvcc, server, priority):
    program = build_cuda(nvcc, "graph_conditional.cu")
    job = run_job(server.socket, program, str(REPLAYS), priority=priority, timeout=300)
    check_conditional_job(job)
    assert server.status()["server"]["scheduler"]["graph_launches"] == 0
    assert "with tally's cudaGraphSetConditional" in server.process.log()
    server.wait_for(idle, what="the job's memory, conditional values included, given back")
