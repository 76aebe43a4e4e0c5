"""What tally's CUPTI (client_preload/src/cupti/, docs/cupti.md) costs a job, through
tally-run to a tally-server with the `null` backend (which executes nothing, so what
is left is tally's own work): tests/cuda/programs/cupti_overhead.cu times the same
launches in the job with no activity kind on (the baseline, same run) and with
kernel records on (each launch then records two timing events), and the forced
flush that reads each record's times back from the server.

Reported (medians of 7 rounds of 2,000 launches): microseconds per launch off and
on, their ratio, and microseconds per record at the flush. No target: the cost is
paid only while a profiler has kernel records on.

Run: python -m pytest bench/bench_cupti.py -q
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from server_harness import ServerProcess  # noqa: E402
from e2e_helpers import build_cuda, run_job  # noqa: E402
from test_e2e_cupti import cupti_library_dir  # noqa: E402


def test_cupti_overhead_per_launch_and_per_record(tmp_path, figures, nvcc):
    folder = cupti_library_dir()
    assert folder is not None, "the toolkit ships no libcupti"
    program = build_cuda(nvcc, "cupti_overhead.cu",
                         flags=(f"-L{folder}", "-lcupti", "-Xlinker", f"-rpath={folder}"))
    server = ServerProcess(tmp_path / "s.sock", backend="null")
    try:
        job = run_job(server.socket_path, program, 2000, 7, timeout=600)
    finally:
        server.stop()
    assert job.returncode == 0, job.stdout + job.stderr
    measured = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", job.stdout)}
    measured["on_vs_off"] = measured["on_us_per_launch"] / measured["off_us_per_launch"]
    for key, value in measured.items():
        figures.add("tally's CUPTI (null backend, medians of 7 x 2000 launches)", f"{key}: {value:.3g}")
    assert measured["records"] == 14000
