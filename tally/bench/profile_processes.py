"""`tally-bench profile --backend emulator|cuda`: a model-serving program's
throughput and p99 latency at each SM share, measured with real processes.

For each (share, batch) a fresh `tally-server --backend B` starts on a private
socket, and the program (a high-priority job of tally/bench/process_jobs.py,
e.g. dense-inference) runs under `tally-run --priority high --sm-percent P`
with `--batch N`. Every request of its arrival file arrives at t0, so it serves
batches back to back for `duration` seconds, as a saturated server does:

- throughput = batch x the requests completed by t0 + duration / duration
  (inputs per second, the unit of the sim's table);
- p99 = the 99th percentile of the requests' service times (one batch, start
  to completion: no queueing counted, as in the sim's table).

The share the server granted is read from its log ("SM share 25% (2 SMs)")
and a run whose job did not get the asked share fails. On a GPU green
contexts confine the job's kernels to the share's SMs. On the emulator the
share caps the job's kernels to that many of the emulator's worker threads
(`--emulate-sms`, default 8): the figures are CPU-interpreter timings that
show the confinement (throughput grows with the share up to the host's
cores), not a GPU's speed, and the table's `source` says so.
"""
from __future__ import annotations

import math
import os
import platform
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tally.bench.process_group import JobFailed
from tally.bench.process_jobs import HIGH, PROGRAMS
from tally.bench.process_results import ReportError, high_priority_result
from tally.bench.process_runner import ProcessColocateConfig, ProcessRunner
from tally.bench.profile_runner import Measurement, Partition
from tally.cli.server_main import query_status

PROFILE_BACKENDS = ("emulator", "cuda")
# Arrivals written per second of the window: more than any program here serves (a
# request is at least two synchronous copies through the server). A job that still
# serves them all before the window ends is measured over the time it took.
SATURATING_RATE = 20_000
GRANTED = re.compile(r"SM share ([0-9.]+)% \((\d+) SMs\)")
MIN_REQUESTS = 5


class ProfileRunError(RuntimeError):
    """A profiling run failed or measured nothing; the message says which and why."""


@dataclass(frozen=True)
class ShareRun:
    """What one run measured, for the progress lines and the results file."""

    model: str
    percent: float
    batch: int
    requests: int              # completed within the window
    granted_sms: int
    device_sms: int
    measurement: Measurement


def high_priority_programs() -> tuple[str, ...]:
    return tuple(name for name, p in PROGRAMS.items() if p.role == HIGH)


class ProcessProfileRunner:
    """Measures a job program at an SM share; one fresh server per measurement.
    Use as a context manager: the runs' directory goes at the end unless kept."""

    def __init__(self, backend: str, duration_s: float, job_args: tuple[str, ...] = (),
                 emulate_sms: int | None = None, keep_workdir: bool = False, progress=None):
        if backend not in PROFILE_BACKENDS:
            raise ValueError(f"real-process profiling runs on {', '.join(PROFILE_BACKENDS)}, not {backend!r}")
        if not duration_s > 0:
            raise ValueError(f"--duration must be > 0 s, got {duration_s}")
        if emulate_sms is not None and backend != "emulator":
            raise ValueError("--emulate-sms sets the emulator's SM count; a GPU has its own")
        self.backend, self.duration_s, self.job_args = backend, duration_s, tuple(job_args)
        self.emulate_sms = emulate_sms
        self.keep_workdir = keep_workdir
        self.progress = progress or (lambda line: None)
        self.workdir = Path(tempfile.mkdtemp(prefix="tally-profile-"))
        self.device_name = ""
        self.runs: list[ShareRun] = []
        self._runners: dict[str, ProcessRunner] = {}

    models = high_priority_programs()        # the cuda workload's on either backend; torch's need a GPU
    default_models = ("dense-inference",)
    memory_gb: dict[str, float] = {}         # the programs do not declare it

    def __enter__(self) -> ProcessProfileRunner:
        return self

    def __exit__(self, *exc) -> None:
        for runner in self._runners.values():
            runner.__exit__(*exc)
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def source(self) -> str:
        models = sorted({r.model for r in self.runs}) or list(self.default_models)
        sms = sorted({r.device_sms for r in self.runs})
        job = ", ".join(models) + (" " + shlex.join(self.job_args) if self.job_args else " (its default sizes)")
        head = (f"tally-bench profile --backend {self.backend}: {job} under `tally-run --priority high "
                f"--sm-percent P` with --batch N on a fresh tally-server --backend {self.backend} per share and "
                f"batch, serving batches back to back for {self.duration_s:g} s; throughput = inputs completed "
                f"in that window / its length, p99 = of one batch's service time")
        if self.backend == "emulator":
            return (f"{head}. Measured on the CPU emulator ({'/'.join(map(str, sms)) or '?'} emulated SMs, one "
                    f"worker thread each) on {host_description()}: CPU-interpreter timings, not a GPU's. They "
                    f"show the share's confinement (throughput grows with the share up to the host's cores); "
                    f"the gpu field names the planner's target, not the device measured")
        return f"{head}. Measured on {self.device_name or 'the GPU'} (green contexts confine the job to its share)"

    def measure(self, model: str, partition: Partition, batch: int) -> Measurement:
        percent = partition.percent
        if percent is None:
            raise ValueError(f"{partition.name} is not an SM share; real processes are profiled at SM shares")
        runner = self._runner(model)
        arrivals = np.zeros(math.ceil(self.duration_s * SATURATING_RATE))
        name = f"{percent:g}pct-b{batch}"
        with runner.server_run(name, "priority") as (group, server, directory):
            report = runner.run_high_priority(group, server, directory, arrivals, self.duration_s,
                                              sm_percent=percent, job_args=("--batch", str(batch)))
            status = _server_record(server)
            self.device_name = status.get("device_name", "")
            device_sms = int(status.get("sm_count", 0))
            granted = _granted(server.process.log_path, percent)
        try:
            result = high_priority_result(report, arrivals, self.duration_s)
        except ReportError as e:
            raise ProfileRunError(f"{model} at {percent:g}% with batch {batch}: {e}") from None
        served = result.service.size
        window = self.duration_s if result.unfinished else min(self.duration_s, float(report["end_s"][-1]))
        completed = result.completed_in_window if result.unfinished else served
        if completed < MIN_REQUESTS:
            raise ProfileRunError(f"{model} at {percent:g}% with batch {batch} completed {completed} requests in "
                                  f"{self.duration_s:g} s, too few for a p99; raise --duration "
                                  f"(--keep-workdir keeps the runs' logs)")
        m = Measurement(batch * completed / window, float(np.percentile(result.service, 99)) * 1e3)
        self.runs.append(ShareRun(model, percent, batch, completed, granted, device_sms, m))
        self.progress(f"{model} at {percent:g}% ({granted} of {device_sms} SMs granted), batch {batch}: "
                      f"{m.throughput:.1f} inputs/s, p99 {m.latency_ms:.2f} ms ({completed} requests)")
        return m

    def _runner(self, model: str) -> ProcessRunner:
        if model not in self._runners:
            program = PROGRAMS[model]
            server_args = ("--emulate-sms", str(self.emulate_sms)) if self.emulate_sms else ()
            config = ProcessColocateConfig.for_workload(program.workload, hp_job=model, backend=self.backend,
                                                        policies=("priority",), drain_s=0.0,
                                                        hp_args=self.job_args, server_args=server_args)
            self._runners[model] = ProcessRunner(config, workdir=self.workdir / model, keep_workdir=True)
        return self._runners[model]


def _server_record(server) -> dict:
    try:
        return query_status(server.socket_path, timeout=10.0)["server"]
    except (OSError, ConnectionError) as e:
        raise server.process.failure(f"did not answer its status query ({e})") from None


def _granted(log_path: Path, percent: float) -> int:
    """The SMs the server granted the job, from its log of the job's attach;
    ProfileRunError unless the job got the share asked for."""
    text = Path(log_path).read_text(errors="replace")
    found = GRANTED.findall(text)
    if not found:
        raise ProfileRunError(f"the server's log {log_path} does not show the job's SM share "
                              f"(no 'SM share P% (N SMs)' line); was it started with tally-run --sm-percent?")
    asked, granted = found[-1]
    if abs(float(asked) - percent) > 1e-6:
        raise ProfileRunError(f"the job asked for {percent:g}% of the SMs but the server gave it {asked}% "
                              f"(log: {log_path})")
    return int(granted)


def host_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"a host with {os.cpu_count()} CPU cores ({cpu})"


__all__ = ["PROFILE_BACKENDS", "JobFailed", "Measurement", "ProcessProfileRunner", "ProfileRunError"]
