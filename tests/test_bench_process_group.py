"""The benchmarks' processes (tally/bench/process_group.py) start with SIGINT's
default action even when the benchmark itself ignores it (started in the
background of a script): `tally-bench chaos` strikes jobs with SIGINT, and an
ignored SIGINT stays ignored across exec, so the strikes did nothing."""
from __future__ import annotations

import signal
import sys

from tally.bench.process_group import Managed

REPORT = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_process_gets_sigint_back_when_the_benchmark_ignores_it(tmp_path):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        job = Managed("probe", [sys.executable, "-c", REPORT], tmp_path / "probe.log", None)
        assert job.wait(60) == 0, job.output()
    finally:
        signal.signal(signal.SIGINT, previous)
    # Python installs its KeyboardInterrupt handler only where SIGINT was not ignored at start.
    assert job.output().strip() == "True"
