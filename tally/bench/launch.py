"""`tally-bench launch`: what a kernel launch costs tally's server, with the C++
data plane and the Python one in the same run (docs/data-plane.md).

    tally-bench launch --backend null [--json FILE]

One job program (tally/bench/jobs/launch_rate.cu, compiled with nvcc on first
use) runs under tally-run against a fresh `tally-server --data-plane cpp|python`
on a private socket, and times itself:
- back-to-back launches of an empty kernel, a high-priority job and a
  best-effort job, each plane: the time from a round's first launch to the end
  of its synchronization, per launch (`*_us_per_launch`; the server takes the
  launches while the job makes them, so this is the server's cost per launch
  where the server is the slower side, and the job's own cost otherwise: both
  are reported);
- a synchronization of an idle device (`sync_rtt_us`) and one after the job
  computed alone long enough for the server's session thread to sleep
  (`wake_us`), with this machine's futex wake-ups in the same job as the
  baselines (tally/bench/jobs/futex_floor.h): of a thread (`futex_wake_us`), of
  a process (`futex_wake_process_us`) and of two processes in turn
  (`futex_wake_two_us`), each also until the waker sees the sleeper ran
  (`*_rtt_us`; `futex_wake_process_rtt_us` is the least a job can wait for an
  answer from a server that was asleep);
- the same two synchronizations against a C++-plane server whose high-priority
  sessions poll (`--hp-spin-us inf`: `polling_sync_rtt_us`, `polling_wake_us`),
  the explicit choice docs/data-plane.md describes;
- `jobs` high-priority jobs launching at once on one server
  (`aggregate_launches_per_s`);
- the raw ring round trip (C++ on both sides, an echo process), when the build
  has tally._core.transport_bench (editable installs; a wheel leaves it out).
On the cuda backend the same program also runs without tally, for
`native_launches_per_s`.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tally import _core
from tally.bench.process_group import JobFailed, Managed, ProcessGroup, wait_for
from tally.bench.process_jobs import build_cuda_job, printed_figures
from tally.cli import commands

BACKENDS = ("null", "cuda")
PLANES = ("cpp", "python")
# Issue 16's targets on a 2-core VM: (key, bound, "<=" or ">=").
TARGETS = (("hp_us_per_launch", 1.0, "<="), ("hp_speedup_vs_python", 10.0, ">="), ("be_us_per_launch", 3.0, "<="),
           ("sync_rtt_us", 3.0, "<="), ("wake_us", 10.0, "<="), ("aggregate_launches_per_s", 1e6, ">="),
           ("native_ratio", 0.8, ">="))
JOB_TIMEOUT_S = 600.0
# The wake-up baselines launch_rate measures (futex_floor.h): a thread, a process, two processes in turn.
FUTEX_FLOORS = ("futex_wake", "futex_wake_process", "futex_wake_two")


@dataclass(frozen=True)
class LaunchBenchConfig:
    backend: str = "null"
    rounds: int = 20          # timed rounds of launches per job
    batch: int = 2000         # launches per round (they fit a job's request ring)
    syncs: int = 2000
    wakes: int = 200
    gap_us: float = 1000.0    # longer than the server's spin before it sleeps
    jobs: int = 4
    # rounds of the best-effort job (None: `rounds`): its kernels wait for the policy, which
    # may hold each until the one before completed, so each can cost a completion round trip
    be_rounds: int | None = None

    def validate(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        for name in ("rounds", "batch", "syncs", "wakes", "jobs"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.be_rounds is not None and self.be_rounds < 1:
            raise ValueError(f"--be-rounds must be at least 1, got {self.be_rounds}")
        if not self.gap_us > 0:
            raise ValueError(f"--gap-us must be > 0, got {self.gap_us}")


# the server's line for each job that left (tally/server/session.py)
TAKEN_BY_CPP = re.compile(r"\(\d+ requests, (\d+) of them taken by the C\+\+ data plane\)")


def requests_taken_by_cpp(server_log: Path) -> int:
    """How many of its jobs' requests a server's C++ data plane took: what tells the
    planes apart in a report, whatever the machine's load did to the timings."""
    return sum(int(n) for n in TAKEN_BY_CPP.findall(server_log.read_text(errors="replace")))


class _Server:
    """A tally-server with the given data plane, in its own process group."""

    def __init__(self, group: ProcessGroup, backend: str, plane: str, directory: Path, hp_jobs: int = 1,
                 extra: tuple[str, ...] = ()):
        self.socket_path = directory / f"server-{plane}.sock"
        argv = [*commands.tool("tally-server"), "--backend", backend, "--data-plane", plane,
                "--max-hp-jobs", str(hp_jobs), "--socket", str(self.socket_path), *extra]
        self.process = group.start(f"tally-server (--backend {backend} --data-plane {plane})", argv,
                                   f"server-{plane}.log")
        wait_for(self.socket_path.exists, 60.0, self.process, "listening on its socket")


class LaunchBench:
    def __init__(self, config: LaunchBenchConfig, directory: Path):
        self.config = config
        self.directory = directory
        self.program = build_cuda_job("launch_rate.cu")
        self._jobs = 0

    # ---- one job ------------------------------------------------------------------

    def _job_argv(self, server: _Server | None, priority: str, *args: str) -> list[str]:
        job = [str(self.program), *args]
        if server is None:
            return job                      # natively, on the real driver
        return [*commands.tool("tally-run"), "--server", str(server.socket_path), "--priority", priority, "--", *job]

    def _start(self, group: ProcessGroup, server: _Server | None, priority: str, *args: str) -> Managed:
        self._jobs += 1
        label = f"launch_rate {' '.join(args)} ({priority})"
        return group.start(label, self._job_argv(server, priority, *args), f"job-{self._jobs}.log",
                           env=_job_env())

    def _values(self, job: Managed) -> dict[str, float]:
        status = job.wait(JOB_TIMEOUT_S)
        if status != 0:
            raise job.failure(f"exited with status {status}")
        return printed_figures(job.output())

    def _run(self, group, server, priority: str, *args: str) -> dict[str, float]:
        return self._values(self._start(group, server, priority, *args))

    def _launches(self, group, server, priority: str) -> dict[str, float]:
        c = self.config
        rounds = c.be_rounds if priority == "best-effort" and c.be_rounds is not None else c.rounds
        return self._run(group, server, priority, "--mode", "launches", "--rounds", str(rounds),
                         "--batch", str(c.batch))

    # ---- the measurements -------------------------------------------------------------

    def plane_figures(self, plane: str) -> dict[str, float]:
        c = self.config
        with ProcessGroup(self.directory / plane) as group:
            server = _Server(group, c.backend, plane, self.directory / plane)
            hp = self._launches(group, server, "high")
            be = self._launches(group, server, "best-effort")
            sync = self._run(group, server, "high", "--mode", "sync", "--count", str(c.syncs))
            wake = self._run(group, server, "high", "--mode", "wake", "--count", str(c.wakes),
                             "--gap-us", str(c.gap_us))
        return {"hp_us_per_launch": hp["drain_ns"] / 1e3, "hp_client_us_per_launch": hp["client_ns"] / 1e3,
                "be_us_per_launch": be["drain_ns"] / 1e3, "be_client_us_per_launch": be["client_ns"] / 1e3,
                "sync_rtt_us": sync["sync_ns"] / 1e3, "sync_p99_us": sync["p99_ns"] / 1e3,
                "wake_us": wake["wake_ns"] / 1e3,
                "requests_taken_by_cpp": requests_taken_by_cpp(self.directory / plane / f"server-{plane}.log"),
                **{f"{key}_us": wake[f"{key}_ns"] / 1e3 for key in FUTEX_FLOORS},
                **{f"{key}_rtt_us": wake[f"{key}_rtt_ns"] / 1e3 for key in FUTEX_FLOORS},
                **{f"{key}_same_cpu": wake[f"{key}_same_cpu"] for key in FUTEX_FLOORS}}

    def polling_figures(self) -> dict[str, float]:
        """Idle and after-idle synchronizations when the high-priority session polls (cpp plane)."""
        c = self.config
        with ProcessGroup(self.directory / "polling") as group:
            server = _Server(group, c.backend, "cpp", self.directory / "polling", extra=("--hp-spin-us", "inf"))
            sync = self._run(group, server, "high", "--mode", "sync", "--count", str(c.syncs))
            wake = self._run(group, server, "high", "--mode", "wake", "--count", str(c.wakes),
                             "--gap-us", str(c.gap_us))
        return {"polling_sync_rtt_us": sync["sync_ns"] / 1e3, "polling_wake_us": wake["wake_ns"] / 1e3}

    def aggregate(self) -> float:
        """Launches per second of `jobs` high-priority jobs launching at once (cpp plane)."""
        c = self.config
        with ProcessGroup(self.directory / "aggregate") as group:
            server = _Server(group, c.backend, "cpp", self.directory / "aggregate", hp_jobs=c.jobs)
            start_at = time.monotonic() + 3.0 + 0.5 * c.jobs     # after every job has started and warmed up
            jobs = [self._start(group, server, "high", "--mode", "together", "--start-at", f"{start_at:.6f}",
                                "--rounds", str(c.rounds), "--batch", str(c.batch)) for _ in range(c.jobs)]
            results = [self._values(job) for job in jobs]
        if min(r["start_s"] for r in results) < start_at - 1e-3:
            raise JobFailed("a launch_rate job started before the common start time (clock mismatch?)")
        span = max(r["end_s"] for r in results) - start_at
        return sum(r["launches"] for r in results) / span

    def native(self) -> float:
        """Launches per second of the same program on the real driver, without tally."""
        with ProcessGroup(self.directory / "native") as group:
            values = self._values(self._start(group, None, "native", "--mode", "launches", "--rounds",
                                              str(self.config.rounds), "--batch", str(self.config.batch)))
        return 1e9 / values["drain_ns"]


def run_launch_bench(config: LaunchBenchConfig) -> dict:
    config.validate()
    with tempfile.TemporaryDirectory(prefix="tally-bench-launch-") as tmp:
        bench = LaunchBench(config, Path(tmp))
        planes = {plane: bench.plane_figures(plane) for plane in PLANES}
        polling = bench.polling_figures()
        aggregate = bench.aggregate()
        native = bench.native() if config.backend == "cuda" else None
    cpp, py = planes["cpp"], planes["python"]
    report = {
        "hp_us_per_launch": cpp["hp_us_per_launch"],
        "be_us_per_launch": cpp["be_us_per_launch"],
        "python_hp_us_per_launch": py["hp_us_per_launch"],
        "sync_rtt_us": cpp["sync_rtt_us"],
        "wake_us": cpp["wake_us"],
        "aggregate_launches_per_s": aggregate,
        **polling,
        "python_be_us_per_launch": py["be_us_per_launch"],
        "hp_speedup_vs_python": py["hp_us_per_launch"] / cpp["hp_us_per_launch"],
        "be_speedup_vs_python": py["be_us_per_launch"] / cpp["be_us_per_launch"],
        **{f"{key}{unit}": statistics.median([cpp[f"{key}{unit}"], py[f"{key}{unit}"]])
           for key in FUTEX_FLOORS for unit in ("_us", "_rtt_us")},
        "ring_rtt_us": ring_round_trip_us(),
        "planes": planes,
        "config": asdict(config),
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
    }
    if native is not None:
        report["native_launches_per_s"] = native
        report["native_ratio"] = (1e6 / cpp["hp_us_per_launch"]) / native
    report["targets"] = {key: {"target": f"{op} {bound:g}", "met": _met(report[key], op, bound)}
                         for key, bound, op in TARGETS if report.get(key) is not None}
    return report


def _met(value: float, op: str, bound: float) -> bool:
    return value <= bound if op == "<=" else value >= bound


def summary(report: dict) -> str:
    py = report["planes"]["python"]
    ring = report["ring_rtt_us"]
    lines = [
        f"high priority: {report['hp_us_per_launch']:.3f} us per launch (C++ plane), "
        f"{report['python_hp_us_per_launch']:.2f} us (Python plane): {report['hp_speedup_vs_python']:.0f}x; "
        f"the job's own launch call {report['planes']['cpp']['hp_client_us_per_launch']:.3f} us",
        f"best effort:   {report['be_us_per_launch']:.3f} us per launch (C++ plane), "
        f"{report['python_be_us_per_launch']:.2f} us (Python plane): {report['be_speedup_vs_python']:.0f}x",
        f"synchronize:   {report['sync_rtt_us']:.2f} us idle (Python plane {py['sync_rtt_us']:.2f} us); "
        f"raw ring round trip " + (f"{ring:.2f} us" if ring is not None else "not measured (no transport_bench "
                                                                                 "in this build)"),
        f"after idle:    {report['wake_us']:.1f} us (Python plane {py['wake_us']:.1f} us); this machine's futex "
        f"wake-up of a thread {report['futex_wake_us']:.1f} us, of a process {report['futex_wake_process_us']:.1f} us "
        f"(seen by the waker {report['futex_wake_process_rtt_us']:.1f} us), of two processes in turn "
        f"{report['futex_wake_two_us']:.1f} us",
        f"polling:       {report['polling_sync_rtt_us']:.2f} us idle, {report['polling_wake_us']:.1f} us after idle "
        f"(high-priority sessions with --hp-spin-us inf)",
        f"{report['config']['jobs']} jobs at once: {report['aggregate_launches_per_s'] / 1e6:.2f} M launches/s",
    ]
    if "native_launches_per_s" in report:
        lines.append(f"natively: {report['native_launches_per_s'] / 1e6:.2f} M launches/s; through tally "
                     f"{report['native_ratio']:.2f}x")
    lines.append("targets: " + ", ".join(f"{k} {t['target']} {'met' if t['met'] else 'NOT met'}"
                                         for k, t in report["targets"].items()))
    return "\n".join(lines)


def _job_env() -> dict:
    # The job finds only tally's driver; the data plane is the server's flag, not the environment's.
    return {k: v for k, v in os.environ.items() if k != "TALLY_DATA_PLANE"}


# ---- the raw ring baseline --------------------------------------------------------------

def _echo(conn) -> None:
    from tally._core import transport_bench as tb
    name = f"/tally-bench-launch-{os.getpid()}"
    segment = _core.Segment.create(name, 1 << 16, 1 << 16, 1 << 16, 1 << 16)
    conn.send(name)
    conn.recv()
    segment.unlink()
    tb.echo_records(segment.request_ring, segment.completion_ring, timeout=60)
    segment.mark_closed()


def ring_round_trip_us(count: int = 20_000) -> float | None:
    """Median round trip of a small record through a request and a completion ring,
    C++ on both sides, another process echoing; None without transport_bench."""
    try:
        from tally._core import transport_bench as tb
    except ImportError:
        return None
    spawn = multiprocessing.get_context("spawn")
    conn, child = spawn.Pipe()
    process = spawn.Process(target=_echo, args=(child,), daemon=True)
    process.start()
    try:
        segment = _core.Segment.open(conn.recv())
        conn.send("opened")
        latencies = tb.round_trips(segment.request_ring, segment.completion_ring, count, 48)
        segment.request_ring.push(tb.STOP_KIND, 0)
    finally:
        process.join(30)
        if process.is_alive():
            process.kill()
    return statistics.median(latencies[count // 10:]) / 1e3
