"""The client library's own costs, through tally-run to a tally-server with the
`null` backend (which executes nothing, so what is left is tally's forwarding):

1. an asynchronous cuLaunchKernel, client side: batches of launches that fit the
   request ring, timed in the job (tests/cuda/programs/launch_bench.c); baseline:
   the same parameter packing through a plain function call, same run.
   Target: <= 1 us per launch.
2. a synchronous call's round trip: cuCtxSynchronize on an idle device, timed per
   call in the job; baselines, same run: the raw ring round trip (C++ client, C++
   echo process, _core.transport_bench) and tally_client_ping (the server's
   cheapest request: the session's fixed cost). Target: <= 10 us median.
   Also reported: the same call after the job computed alone for a while, when
   the server's session thread may have gone to sleep.

Every figure is timed inside the job (or the echo process) and printed after
the run under "figures"; there is no pytest-benchmark table, because the
benchmark fixture would time this process, which only reads the job's output.
The server's side of a launch, with either data plane, is `tally-bench launch`'s.

Run: python -m pytest bench/bench_client.py -q
"""
from __future__ import annotations

import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tally._core import transport_bench as tb

from tally import _core

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from server_harness import ServerProcess
from e2e_helpers import build_device_code, build_driver_c, job_command, job_env

SPAWN = multiprocessing.get_context("spawn")
ROUNDS, BATCH, SYNCS = 30, 2000, 5000
GAPS_US = (50, 200, 1000, 5000)


def serve_echo(conn) -> None:
    name = f"/tally-bench-client-{os.getpid()}"
    seg = _core.Segment.create(name, 1 << 16, 1 << 16, 1 << 16, 1 << 16)
    conn.send(name)
    conn.recv()
    seg.unlink()
    conn.send(tb.echo_records(seg.request_ring, seg.completion_ring, timeout=120))
    seg.mark_closed()


@pytest.fixture(scope="module")
def job_figures(nvcc):
    """Runs the timing job once against a null-backend server; its key=value lines."""
    ptx = build_device_code(nvcc, "driver_kernels.cu", "ptx")
    program = build_driver_c("launch_bench.c")
    with tempfile.TemporaryDirectory(prefix="tally-bench-") as d:
        server = ServerProcess(Path(d) / "server.sock", backend="null")
        try:
            run = subprocess.run(job_command(server.socket_path, program, ptx, ROUNDS, BATCH, SYNCS, *GAPS_US),
                                 capture_output=True, text=True, timeout=600, env=job_env(), check=False)
        finally:
            server.stop()
    assert run.returncode == 0, run.stdout + run.stderr
    values = {}
    for line in run.stdout.splitlines():
        for token in line.split():
            key, _, value = token.partition("=")
            values.setdefault(key, value)
    return values


@pytest.fixture(scope="module")
def ring_round_trip_ns():
    """Median raw ring round trip, C++ on both sides, another process echoing."""
    conn, child = SPAWN.Pipe()
    process = SPAWN.Process(target=serve_echo, args=(child,), daemon=True)
    process.start()
    segment = _core.Segment.open(conn.recv())
    conn.send("opened")
    latencies = tb.round_trips(segment.request_ring, segment.completion_ring, 20_000, 48)
    segment.request_ring.push(tb.STOP_KIND, 0)
    conn.recv()
    process.join(30)
    return statistics.median(latencies[2_000:])


def test_async_launch_client_cost(job_figures, figures):
    launch_ns = float(job_figures["launch_ns"])
    plain_ns = float(job_figures["plain_call_ns"])
    figures.add(f"1. asynchronous cuLaunchKernel, client side (median of {ROUNDS} batches of {BATCH})",
                f"{launch_ns:.1f} ns per launch; plain function call packing the same parameters "
                f"{plain_ns:.1f} ns ({launch_ns / plain_ns:.1f}x); server-side launch failures seen at "
                f"sync: {job_figures['sync_errors']} of {ROUNDS + 1} rounds [target <= 1000 ns]")
    figures.add("1. the server taking the launches (first launch to end of the round's cuCtxSynchronize)",
                f"{float(job_figures['drain_ns']) / 1000:.2f} us per launch (the server's default data plane; "
                f"`tally-bench launch` compares both)")
    assert launch_ns <= 1000


def test_sync_round_trip(job_figures, ring_round_trip_ns, figures):
    sync_ns = float(job_figures["sync_ns"])
    ping_ns = float(job_figures["ping_ns"])
    figures.add(f"2. cuCtxSynchronize on an idle device (median of {SYNCS})",
                f"{sync_ns / 1000:.2f} us (p99 {float(job_figures['p99']) / 1000:.2f} us); tally_client_ping "
                f"{ping_ns / 1000:.2f} us; raw ring round trip (C++ echo) {ring_round_trip_ns / 1000:.2f} us; "
                f"sync costs {sync_ns / ring_round_trip_ns:.0f}x the raw ring [target <= 10 us]")
    gaps = ", ".join(f"{gap} us: {float(job_figures[f'gap_{gap}_us_sync_ns']) / 1000:.1f} us" for gap in GAPS_US)
    figures.add("2. cuCtxSynchronize after the job computed alone for a while (median)", gaps)
    assert sync_ns <= 10_000
