"""The demo's view of its server and jobs: status sampled over time.

A sampler thread asks the server for its status every few tens of
milliseconds, so the demo can tell when a job is attached, how fast a
best-effort job's kernels complete while another job runs, and show a status
snapshot taken while both jobs are attached (not at a guessed moment).
"""
from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tally.cli import commands
from tally.cli.server_main import format_status, query_status
from tally.server.status import ServerStatus

SAMPLE_S = 0.05


@dataclass
class Sample:
    t: float
    status: dict

    def kernels_completed(self, pid: int) -> int | None:
        """Kernels the job started as process `pid` (tally-run, whose child is the
        job) has completed, None while it is not attached."""
        for client in self.status["clients"]:
            if pid in (client["pid"], client.get("parent_pid")):
                per_client = self.status["server"].get("scheduler", {}).get("clients", {})
                return per_client.get(client["client_id"], {}).get("kernels_completed", 0)
        return None


def parent_pid(pid: int) -> int | None:
    """The parent of a process of this machine, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) is in parentheses and may hold spaces
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class ServerWatch:
    def __init__(self, process: subprocess.Popen, socket: Path, log: Path):
        self.process, self.socket, self.log = process, socket, log
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        first = query_status(socket)["server"]
        self.backend = first["backend"]
        where = "the CPU emulator (no GPU found)" if self.backend == "emulator" else first["device_name"]
        self.banner = f"tally-server runs on {where}; its socket is {socket}"
        self._thread = threading.Thread(target=self._sample, daemon=True, name="demo-status")
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                status = query_status(self.socket)
            except (OSError, ConnectionError):
                continue
            for client in status["clients"]:   # noted while the job runs: tally-run is its parent
                client["parent_pid"] = parent_pid(client["pid"])
            with self._lock:
                self.samples.append(Sample(time.monotonic(), status))

    def history(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def counters(self) -> dict:
        scheduler = query_status(self.socket)["server"].get("scheduler", {})
        return {k: v for k, v in scheduler.items() if isinstance(v, int)}

    def snapshot_when_attached(self, clients: int, until: "JobWatch", timeout: float = 60.0) -> str | None:
        """`tally-server status`, as printed, from the first moment `clients` jobs are
        attached; None if `until` ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and until.process.poll() is None:
            status = query_status(self.socket)
            if len(status["clients"]) >= clients:
                return format_status(ServerStatus.from_json(status))
            time.sleep(0.01)
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(backend: str, directory: Path) -> ServerWatch:
    socket_path, log_path = directory / "server.sock", directory / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([*commands.tool("tally-server"), "--backend", backend,
                                    "--socket", str(socket_path)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not socket_path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"tally-server did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    return ServerWatch(process, socket_path, log_path)


@dataclass
class JobWatch:
    argv: list[str]
    server: ServerWatch
    process: subprocess.Popen
    started: float
    ended: float | None = None
    output: str = ""
    returncode: int | None = None
    _reader: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def start(cls, argv: list[str], server: ServerWatch) -> "JobWatch":
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        job = cls(argv, server, process, time.monotonic())
        job._reader = threading.Thread(target=job._read, daemon=True)
        job._reader.start()
        return job

    @classmethod
    def run(cls, argv: list[str], server: ServerWatch) -> "JobWatch":
        job = cls.start(argv, server)
        job.finish()
        print("  " + job.output.strip().replace("\n", "\n  "), flush=True)
        return job

    def _read(self) -> None:
        self.output = self.process.stdout.read()

    def finish(self) -> None:
        self.returncode = self.process.wait()
        self.ended = time.monotonic()
        self._reader.join()

    def wait_until_running(self, timeout: float = 60.0) -> None:
        """Until the server has completed a kernel of this job (or the job ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            history = self.server.history()
            if history and (history[-1].kernels_completed(self.process.pid) or 0) > 0:
                return
            time.sleep(SAMPLE_S)

    def attached(self) -> tuple[float, float] | None:
        """First and last moment the server's status listed this job."""
        seen = [s.t for s in self.server.history() if s.kernels_completed(self.process.pid) is not None]
        return (seen[0], seen[-1]) if seen else None

    def kernel_rate(self, window: tuple[float, float] | None = None) -> float | None:
        """Kernels per second this job completed over `window` (default: while it was
        attached and completing kernels); None with too few samples to tell."""
        points = [(s.t, s.kernels_completed(self.process.pid)) for s in self.server.history()]
        points = [(t, k) for t, k in points if k is not None and (window is None or window[0] <= t <= window[1])]
        if window is None:
            points = [p for p in points if p[1] > 0]
        if len(points) < 2 or points[-1][0] <= points[0][0]:
            return None
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
