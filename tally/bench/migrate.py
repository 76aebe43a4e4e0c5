"""`tally-bench migrate`: how long suspend, resume and migration take against a
job's device footprint, on two tally-servers of this host (the emulator unless
--backend says otherwise). The table and the plot: tally/bench/migrate_report.py.

For each footprint a job (tally/bench/jobs/resident_memory.cu) fills that much
device memory with incompressible bytes and waits; the benchmark suspends and
resumes it twice (the second time into the host memory the first resume kept),
then migrates it A -> B -> A while the job keeps working and measures its
longest call (the pause it saw), and the job checks every byte at the end. Each
operation is timed by the server (its status) and by the operator (the
request's round trip, a CLI's startup excluded); a migration also by step.
With --repeat N each footprint is measured N times and each time is the median.
Baselines in the same run: a host memcpy of the footprint into new memory (what
a first suspension must at least pay: the pages are new to the process) and
into memory touched before (what a suspension into kept buffers must pay).
"""
from __future__ import annotations

import mmap
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from tally.bench.process_jobs import build_cuda_job
from tally.cli import commands
from tally.cli.control_main import send
from tally.cli.server_main import query_status
from tally.protocol.messages_generated import ClientMigrate, ClientResume, ClientSuspend

MIB = 1 << 20
DEFAULT_FOOTPRINTS_MIB = (16, 64, 256, 1024)
BASELINE_SOURCE_BYTES = 64 * MIB     # the baseline copies this, over and over, into the footprint


@dataclass
class Row:
    footprint_mib: int
    memcpy_ms: float              # baseline: the footprint copied into new host memory
    memcpy_warm_ms: float         # ... into host memory touched before
    suspend_ms: float             # server-side
    resume_ms: float
    suspend_again_ms: float       # into the buffers the first resume kept
    resume_again_ms: float
    migrate_ms: float             # A -> B, server-side (source's measurement)
    migrate_back_ms: float        # B -> A
    pause_ms: float               # the job's longest call while it moved A -> B
    pause_back_ms: float
    suspend_wall_ms: float        # the operator's round trip
    resume_wall_ms: float
    migrate_wall_ms: float
    freed_mib: float              # device memory the suspend gave back
    server_peak_mib: float        # the larger of the two servers' peak resident memory so far
    exact: bool
    migrate_steps_ms: dict = field(default_factory=dict)     # A -> B, the source's steps
    import_steps_ms: dict = field(default_factory=dict)      # A -> B, the target's


class BenchServer:
    def __init__(self, directory: Path, name: str, backend: str):
        self.socket = directory / f"{name}.sock"
        self.log = open(directory / f"{name}.log", "w")
        # A GPU's jobs move only between servers that back their memory with
        # reservations (the emulator's always can).
        mobile = ["--suspendable"] if backend == "cuda" else []
        self.proc = subprocess.Popen([*commands.python_module("tally.cli.server_main"), "--backend", backend,
                                      "--socket", str(self.socket), *mobile],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tally-server did not start; see {directory / (name + '.log')}")
            time.sleep(0.05)

    def status(self) -> dict:
        return query_status(self.socket, timeout=30)

    def mobility(self) -> dict:
        return self.status()["server"]["mobility"]

    def request(self, kind: int, payload: bytes) -> float:
        started = time.perf_counter()
        reply = send(self.socket, kind, payload, timeout=600)
        wall_ms = (time.perf_counter() - started) * 1000
        if not reply.ok:
            raise RuntimeError(bytes(reply.tail).decode(errors="replace"))
        return wall_ms

    def suspend_and_resume(self, cid: int) -> tuple[float, float, float, float]:
        """(suspend ms, resume ms, their wall times)."""
        suspend_wall = self.request(ClientSuspend.KIND, ClientSuspend(client_id=cid).encode())
        resume_wall = self.request(ClientResume.KIND, ClientResume(client_id=cid).encode())
        record = self.mobility()
        return record["last_suspend_ms"], record["last_resume_ms"], suspend_wall, resume_wall

    def migrate(self, cid: int, to: BenchServer) -> tuple[float, float, dict]:
        """(server-side ms, wall ms, the source's steps)."""
        wall = self.request(ClientMigrate.KIND, ClientMigrate(client_id=cid, tail=str(to.socket).encode()).encode())
        record = self.mobility()
        return record["last_migration_ms"], wall, record.get("last_migration_steps_ms", {})

    def peak_rss_mib(self) -> float:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def memcpy_ms(nbytes: int) -> tuple[float, float]:
    """(ms to copy nbytes into new host memory, ms into the same memory again)."""
    source = os.urandom(MIB) * (BASELINE_SOURCE_BYTES // MIB)
    target = mmap.mmap(-1, nbytes)
    times = []
    try:
        for _ in range(2):
            started = time.perf_counter()
            for at in range(0, nbytes, len(source)):
                n = min(len(source), nbytes - at)
                target[at:at + n] = source[:n]
            times.append((time.perf_counter() - started) * 1000)
    finally:
        target.close()
    return times[0], times[1]


def only_client(server: BenchServer) -> int:
    deadline = time.monotonic() + 60
    while True:
        clients = server.status()["clients"]
        if len(clients) == 1:
            return clients[0]["client_id"]
        if time.monotonic() > deadline:
            raise RuntimeError(f"expected one job on {server.socket}, found {len(clients)}")
        time.sleep(0.05)


class Job:
    def __init__(self, server: BenchServer, program: Path, mib: int):
        self.proc = subprocess.Popen([*commands.python_module("tally.cli.run_main"), "--server", str(server.socket),
                                      "--", str(program), str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.mib = mib
        self.expect("ready")

    def expect(self, word: str) -> str:
        line = self.proc.stdout.readline().strip()
        if not line.startswith(word):
            raise RuntimeError(f"the {self.mib} MiB job said {line!r}, not {word!r}")
        return line

    def say(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def probing(self, action) -> tuple[object, float]:
        """action()'s result while the job works, and the job's longest call meanwhile (ms)."""
        self.say("probe")
        self.expect("probing")
        result = action()
        self.say("stop")
        return result, float(self.expect("longest_call_ms=").partition("=")[2])

    def finish(self) -> bool:
        out, _ = self.proc.communicate("go\n", timeout=1200)
        return self.proc.returncode == 0 and "wrong=0" in out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def measure(a: BenchServer, b: BenchServer, program: Path, mib: int) -> Row:
    job = Job(a, program, mib)
    try:
        cid = only_client(a)
        before = a.status()["server"]["memory_free"]
        suspend_wall = a.request(ClientSuspend.KIND, ClientSuspend(client_id=cid).encode())
        freed = a.status()["server"]["memory_free"] - before
        resume_wall = a.request(ClientResume.KIND, ClientResume(client_id=cid).encode())
        first = a.mobility()
        again_suspend, again_resume, _, _ = a.suspend_and_resume(cid)
        (migrate_ms, migrate_wall, steps), pause = job.probing(lambda: a.migrate(cid, b))
        import_steps = b.mobility().get("last_import_steps_ms", {})
        (back_ms, _, _), pause_back = job.probing(lambda: b.migrate(only_client(b), a))
        exact = job.finish()
    finally:
        job.kill()
    cold, warm = memcpy_ms(mib * MIB)
    return Row(mib, round(cold, 2), round(warm, 2), first["last_suspend_ms"], first["last_resume_ms"],
               again_suspend, again_resume, migrate_ms, back_ms, pause, pause_back, round(suspend_wall, 2),
               round(resume_wall, 2), round(migrate_wall, 2), round(freed / MIB, 2),
               round(max(a.peak_rss_mib(), b.peak_rss_mib()), 1), exact, steps, import_steps)


def median_row(runs: list[Row]) -> Row:
    """Each time the median of the runs (a loaded host's noise is one-sided); exact
    only if every run was; the steps of the run whose migration took the median."""
    values = {}
    for f in fields(Row):
        got = [getattr(r, f.name) for r in runs]
        if f.name == "exact":
            values[f.name] = all(got)
        elif isinstance(got[0], float):
            values[f.name] = statistics.median(got)
        else:
            values[f.name] = got[0]
    middle = sorted(runs, key=lambda r: r.migrate_ms)[(len(runs) - 1) // 2]
    values["migrate_steps_ms"], values["import_steps_ms"] = middle.migrate_steps_ms, middle.import_steps_ms
    return Row(**values)


def run_migrate_bench(footprints_mib=DEFAULT_FOOTPRINTS_MIB, backend: str = "emulator", on_row=None,
                      repeat: int = 1) -> list[Row]:
    program = build_cuda_job("resident_memory.cu")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tally-bench-migrate-") as directory:
        a = BenchServer(Path(directory), "a", backend)
        b = BenchServer(Path(directory), "b", backend)
        try:
            for mib in footprints_mib:
                rows.append(median_row([measure(a, b, program, mib) for _ in range(repeat)]))
                if on_row is not None:
                    on_row(rows[-1])
        finally:
            a.stop()
            b.stop()
    return rows
