"""`tally-bench colocate --backend cuda|emulator`: the co-location benchmark
with real processes (tally/bench/colocate.py computes the statistics).

Every run gets a fresh `tally-server --backend B --policy P` on a private
socket, so nothing a policy learned or leaked carries into the next run. In a
run the best-effort jobs start first, under `tally-run --priority
best-effort`, and the run waits until each has done one iteration (its
kernels are loaded and, under `priority`, transformed); then the
high-priority job starts under `tally-run --priority high`, warms up, starts
its trace clock t0 and replays the arrival times; throughput is measured over
[t0, t0 + duration] for every job. Then the best-effort jobs are told to stop
(a stop file: they finish their iteration, check their results and exit) and
the server is stopped. Runs without a high-priority job measure the window
from when every best-effort job is ready.

The server's scheduler counters (kernels sliced / PTB / preemptions) are read
with its status query just before the jobs are stopped.
"""
from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tally import paths
from tally.cli import commands
from tally.bench.colocate import ColocateConfig, RunRecord
from tally.bench.process_group import JobFailed, Managed, ProcessGroup, wait_for
from tally.bench.process_jobs import (
    BEST_EFFORT,
    DEFAULT_JOBS,
    HIGH,
    WORKLOADS,
    find_program,
)
from tally.bench.process_results import (
    ReportError,
    high_priority_result,
    iterations_in_window,
    read_report,
)
from tally.cli.server_main import query_status

PROCESS_BACKENDS = ("emulator", "cuda")
CALIBRATION_REQUESTS = 20
# Calibration requests are spaced this many estimated service times apart, so that each
# starts on an idle device like most requests of a trace at moderate load do.
CALIBRATION_SPACING = 4.0


@dataclass(frozen=True)
class ProcessColocateConfig(ColocateConfig):
    """ColocateConfig for real processes: hp_model/be_model name job programs
    (tally/bench/process_jobs.py), not sim models."""

    backend: str = "emulator"
    workload: str = "cuda"
    hp_model: str = DEFAULT_JOBS["cuda"][0]
    be_model: str = DEFAULT_JOBS["cuda"][1]
    hp_args: tuple[str, ...] = ()        # extra arguments of the job programs (sizes)
    be_args: tuple[str, ...] = ()
    be_run_args: tuple[str, ...] = ()    # tally-run flags of the best-effort jobs (e.g. --no-jit-capture)
    drain_s: float = 10.0
    gpu: str = ""                        # the sim's GPU preset: unused (the report names the server's device)
    startup_timeout_s: float = 300.0     # a job's start-up: module loads (and transforms) on the emulator
    server_args: tuple[str, ...] = ()    # more tally-server flags (e.g. --emulate-sms 4)

    def validate(self) -> None:
        if self.backend not in PROCESS_BACKENDS:
            raise ValueError(f"backend {self.backend!r}: real processes run on {', '.join(PROCESS_BACKENDS)}")
        if self.workload not in WORKLOADS:
            raise ValueError(f"--workload must be one of {', '.join(WORKLOADS)}, got {self.workload!r}")
        find_program(self.hp_model, HIGH, self.workload)
        find_program(self.be_model, BEST_EFFORT, self.workload)
        if self.drain_s < 0:
            raise ValueError(f"drain must be >= 0 s, got {self.drain_s}")
        if self.time_slice_ms != ColocateConfig.time_slice_ms:
            raise ValueError("--time-slice-ms is a --backend sim option; tally-server's time-slice policy "
                             "uses its own 10 ms quantum")
        # the shared checks, without the sim's model and GPU names
        dataclasses.replace(ColocateConfig(), policies=self.policies, trace=self.trace, load=self.load,
                            be_jobs=self.be_jobs, duration=self.duration, seed=self.seed,
                            be_transform=self.be_transform, be_sm_percent=self.be_sm_percent,
                            dynamic_sm=self.dynamic_sm, be_sm_floor=self.be_sm_floor,
                            be_util_target=self.be_util_target, sample_period_ms=self.sample_period_ms).validate()

    @classmethod
    def for_workload(cls, workload: str, hp_job: str | None = None, be_job: str | None = None,
                     **fields) -> ProcessColocateConfig:
        hp_default, be_default = DEFAULT_JOBS.get(workload, (None, None))
        return cls(workload=workload, hp_model=hp_job or hp_default, be_model=be_job or be_default, **fields)


@dataclass
class RunLog:
    """What one run did, beyond the RunRecord (for the report's "runs" list)."""

    purpose: str                         # "calibration" | "alone" | "colocated"
    policy: str
    hp: bool
    be_jobs: int
    counters: dict
    checks: list[str]
    be_iterations_per_s: list[float]
    wall_seconds: float
    pids: dict[str, int]                 # every process the run started, by label


class ProcessRunner:
    """The colocate Runner for real backends. Use as a context manager: its
    working directory (sockets, arrival files, logs) goes at the end."""

    def __init__(self, config: ProcessColocateConfig, workdir: Path | None = None, keep_workdir: bool = False):
        config.validate()
        self.config = config
        self.hp_program = find_program(config.hp_model, HIGH, config.workload)
        self.be_program = find_program(config.be_model, BEST_EFFORT, config.workload)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="tally-colocate-"))
        # unix socket paths are limited to 107 bytes: sockets live in a short directory of their own
        self.socket_dir = Path(tempfile.mkdtemp(prefix="colocate-", dir=paths.made_runtime_dir()))
        self.keep_workdir = keep_workdir
        self.log: list[RunLog] = []
        self.calibration_service_ms: list[float] = []
        self.device_name = ""                # as the server describes it
        self._commands: dict[str, list[str]] = {}
        self._runs = 0

    def __enter__(self) -> ProcessRunner:
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- Runner --------------------------------------------------------------------

    def service_time(self) -> float:
        """Median service time of a request that arrives at an idle server.

        Back-to-back requests are served faster than requests that arrive one by one
        (threads stay awake, nothing waits on a wake-up): on the emulator the mean of
        20 back-to-back requests came out at 3.2 ms in runs whose trace requests took
        5 ms or more, so a --load of 0.6 loaded the job to 0.94 and even its run alone
        queued. So a first set of requests served back to back gives an estimate, and
        a second set spaced CALIBRATION_SPACING estimates apart gives the figure."""
        started = time.perf_counter()
        zeros = np.zeros(CALIBRATION_REQUESTS)
        with self.server_run("calibrate", "fifo") as (group, server, directory):
            report = self.run_high_priority(group, server, directory, zeros, duration=0.0)
            estimate = float(np.median(high_priority_result(report, zeros, 0.0).service))
            spaced = np.arange(CALIBRATION_REQUESTS) * CALIBRATION_SPACING * max(estimate, 1e-4)
            report = self.run_high_priority(group, server, directory, spaced, duration=float(spaced[-1]),
                                             name="spaced")
            counters = self._counters(server)
            pids = {m.label: m.pid for m in group.processes}
        hp = high_priority_result(report, spaced, float(spaced[-1]))
        self.calibration_service_ms = [float(s) * 1000 for s in hp.service]
        self.log.append(RunLog("calibration", "fifo", True, 0, counters, [f"high-priority: {hp.check}"], [],
                               time.perf_counter() - started, pids))
        return float(np.median(hp.service))

    def run(self, policy: str, with_hp: bool, be_count: int, arrivals: np.ndarray) -> RunRecord:
        c = self.config
        started = time.perf_counter()
        name = f"{policy}-{'hp' if with_hp else 'nohp'}-{be_count}be"
        record = RunRecord()
        checks: list[str] = []
        with self.server_run(name, policy, shared=with_hp and be_count > 0) as (group, server, directory):
            stop_file = directory / "stop"
            bes = [self._start_best_effort(group, server, directory, i, stop_file) for i in range(be_count)]
            for i, be in enumerate(bes):
                ready = directory / f"be{i}.ready"
                wait_for(ready.exists, c.startup_timeout_s, be, "its first iteration", also=(server.process, *bes))
            if with_hp:
                report = self.run_high_priority(group, server, directory, arrivals, c.duration, watch=bes)
                hp = high_priority_result(report, arrivals, c.duration)
                record.hp_latencies = hp.latencies.tolist()
                record.hp_unfinished = hp.unfinished
                record.hp_completed_in_window = hp.completed_in_window
                checks.append(f"high-priority: {hp.check}")
                window = (hp.t0, hp.t0 + c.duration)
            else:
                now = time.monotonic()
                window = (now, now + c.duration)
                while time.monotonic() < window[1]:
                    for be in bes:
                        if not be.running():
                            raise be.failure(f"exited with status {be.proc.returncode} during the run")
                    time.sleep(min(0.05, max(0.0, window[1] - time.monotonic())))
            record.counters = self._counters(server)
            stop_file.touch()
            for i, be in enumerate(bes):
                report = self._finish(be, directory / f"be{i}.json", ("started", "step_end"), timeout=120.0)
                record.be_progress.append(iterations_in_window(report["started"], report["step_end"], window))
                checks.append(f"best-effort {i + 1}: {report.get('check', '')}")
            pids = {m.label: m.pid for m in group.processes}
        record.wall_seconds = time.perf_counter() - started
        purpose = "colocated" if with_hp and be_count else "alone"
        self.log.append(RunLog(purpose, policy, with_hp, be_count, record.counters, checks,
                               [p / c.duration for p in record.be_progress], record.wall_seconds, pids))
        return record

    # ---- pieces --------------------------------------------------------------------

    def _command(self, program) -> list[str]:
        if program.name not in self._commands:
            self._commands[program.name] = program.command()    # compiles a cuda job once
        return self._commands[program.name]

    def server_run(self, name: str, policy: str, shared: bool = False):
        self._runs += 1
        directory = self.workdir / f"run{self._runs:02d}-{name}"
        return _ServerRun(self.config, policy, directory, self.socket_dir / f"run{self._runs:02d}.sock", shared)

    def _tally_run(self, server: RunningServer, priority: str, sm_percent: float | None = None,
                   flags: tuple[str, ...] = ()) -> list[str]:
        share = ["--sm-percent", f"{sm_percent:g}"] if sm_percent is not None else []
        return [*commands.tool("tally-run"), "--server", str(server.socket_path),
                "--priority", priority, *share, *flags, "--"]

    def _start_best_effort(self, group: ProcessGroup, server: RunningServer, directory: Path, i: int,
                           stop_file: Path) -> Managed:
        argv = (self._tally_run(server, "best-effort", flags=self.config.be_run_args) + self._command(self.be_program)
                + ["--out", str(directory / f"be{i}.json"), "--stop", str(stop_file),
                   "--ready", str(directory / f"be{i}.ready"), *self.config.be_args])
        return group.start(f"best-effort job {i + 1} ({self.be_program.name})", argv, f"be{i}.log")

    def run_high_priority(self, group: ProcessGroup, server: RunningServer, directory: Path, arrivals: np.ndarray,
                          duration: float, watch: list[Managed] = (), name: str = "", sm_percent: float | None = None,
                          job_args: tuple[str, ...] = ()) -> dict:
        """Play `arrivals` to a high-priority job (with its SM share, and `job_args`
        after the config's); `name` tells apart its files and label from another
        one's in the same run."""
        c = self.config
        suffix = f"-{name}" if name else ""
        arrival_file = directory / f"arrivals{suffix}.txt"
        np.savetxt(arrival_file, arrivals, fmt="%.9f")
        argv = (self._tally_run(server, "high", sm_percent) + self._command(self.hp_program)
                + ["--arrivals", str(arrival_file), "--duration", repr(duration), "--drain", repr(c.drain_s),
                   "--out", str(directory / f"hp{suffix}.json"), *c.hp_args, *job_args])
        label = f"high-priority job ({self.hp_program.name}{', ' + name if name else ''})"
        hp = group.start(label, argv, f"hp{suffix}.log")
        limit = c.startup_timeout_s + duration + c.drain_s + 30.0
        # a best-effort job or the server dying while the trace plays is a failure of the run
        wait_for(lambda: not hp.running(), limit, hp, "the end of its trace", also=(server.process, *watch))
        return self._finish(hp, directory / f"hp{suffix}.json", ("t0", "start_s", "end_s", "stopped_s"), timeout=0)

    @staticmethod
    def _finish(job: Managed, report_path: Path, keys: tuple[str, ...], timeout: float) -> dict:
        status = job.wait(timeout)
        if status != 0:
            raise job.failure(f"exited with status {status}")
        try:
            return read_report(report_path, keys)
        except ReportError as e:
            raise job.failure(str(e)) from None

    def _counters(self, server: RunningServer) -> dict:
        try:
            status = query_status(server.socket_path, timeout=10.0)["server"]
        except (OSError, ConnectionError) as e:
            raise server.process.failure(f"did not answer its status query ({e})") from None
        self.device_name = status.get("device_name", "")
        return {k: v for k, v in status.get("scheduler", {}).items() if k != "clients"}

    def describe_runs(self) -> list[dict]:
        return [dataclasses.asdict(r) for r in self.log]


@dataclass
class RunningServer:
    process: Managed
    socket_path: Path


class _ServerRun:
    """Context manager for one run: a process group holding a fresh tally-server."""

    def __init__(self, config: ProcessColocateConfig, policy: str, directory: Path, socket_path: Path,
                 shared: bool = False):
        self.config, self.policy, self.directory, self.socket_path = config, policy, directory, socket_path
        self.shared = shared          # the jobs share the device: the SM-share levers apply
        self.group = ProcessGroup(directory)

    def __enter__(self):
        c = self.config
        self.group.__enter__()
        try:
            socket_path = self.socket_path
            argv = [*commands.tool("tally-server"), "--backend", c.backend, "--policy", self.policy,
                    "--be-transform", c.be_transform, "--turnaround-threshold-ms", repr(c.turnaround_threshold_ms),
                    "--socket", str(socket_path), *(lever_flags(c) if self.shared else ()), *c.server_args]
            process = self.group.start(f"tally-server (--backend {c.backend} --policy {self.policy})", argv,
                                       "server.log")
            wait_for(socket_path.exists, 60.0, process, "listening on its socket")
        except BaseException:
            self.group.__exit__(None, None, None)
            raise
        return self.group, RunningServer(process, socket_path), self.directory

    def __exit__(self, *exc) -> None:
        self.group.__exit__(*exc)


def gpu_present() -> bool:
    """Whether an NVIDIA driver and GPU are here. Asked in a child process: cuInit
    here would initialize the driver in the process that forks every server and job."""
    probe = "from tally.backends.registry import real_driver_present as p; raise SystemExit(0 if p() else 1)"
    return subprocess.run(commands.python_code(probe), check=False).returncode == 0


def lever_flags(c: ColocateConfig) -> list[str]:
    """tally-server's flags for the SM-share levers the config asks for."""
    flags = []
    if c.be_sm_percent is not None:
        flags += ["--be-sm-percent", repr(c.be_sm_percent)]
    if c.dynamic_sm:
        flags += ["--dynamic-sm", "--be-sm-floor", repr(c.be_sm_floor)]
    if c.be_util_target is not None:
        flags += ["--be-util-target", repr(c.be_util_target)]
    if c.dynamic_sm or c.be_util_target is not None:
        flags += ["--sample-period-ms", repr(c.sample_period_ms)]
    return flags


def config_from_args(args) -> ProcessColocateConfig:
    """The config for `tally-bench colocate --backend cuda|emulator` (ValueError on bad options)."""
    return ProcessColocateConfig.for_workload(
        args.workload, args.hp_job, args.be_job, backend=args.backend,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()), trace=args.trace,
        load=args.load, be_jobs=args.be_jobs, duration=args.duration, seed=args.seed,
        be_transform=args.be_transform, turnaround_threshold_ms=args.turnaround_threshold_ms,
        time_slice_ms=args.time_slice_ms, hp_args=tuple(shlex.split(args.hp_args or "")),
        be_args=tuple(shlex.split(args.be_args or "")),
        be_run_args=tuple(shlex.split(getattr(args, "be_run_args", None) or "")), be_sm_percent=args.be_sm_percent,
        dynamic_sm=args.dynamic_sm, be_sm_floor=args.be_sm_floor, be_util_target=args.be_util_target,
        sample_period_ms=args.sample_period_ms)


__all__ = ["PROCESS_BACKENDS", "JobFailed", "ProcessColocateConfig", "ProcessRunner", "config_from_args",
           "gpu_present"]
