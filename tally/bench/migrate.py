"""`tally-bench migrate`: how long suspend, resume and migration take against a
job's device footprint, on two tally-servers of this host (the emulator unless
--backend says otherwise).

For each footprint a job (tally/bench/jobs/resident_memory.cu) fills that much
device memory with incompressible bytes and waits; the benchmark suspends and
resumes it, then migrates it A -> B -> A, and the job checks every byte at the
end. Each operation is timed twice: the server's own measurement (from its
status) and the operator's wall time (the request's round trip, a CLI's
startup excluded). The baseline in the same run is a host memcpy of the
footprint: the pause should be bytes / copy bandwidth plus a small fixed cost.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tally.bench.process_jobs import build_cuda_job
from tally.cli.control_main import send
from tally.cli.server_main import query_status
from tally.protocol.messages_generated import ClientMigrate, ClientResume, ClientSuspend

MIB = 1 << 20
DEFAULT_FOOTPRINTS_MIB = (16, 64, 256, 1024)


@dataclass
class Row:
    footprint_mib: int
    memcpy_ms: float              # baseline: one host copy of the footprint
    suspend_ms: float             # server-side
    resume_ms: float
    migrate_ms: float             # A -> B, server-side (source's measurement)
    migrate_back_ms: float        # B -> A
    suspend_wall_ms: float        # the operator's round trip
    resume_wall_ms: float
    migrate_wall_ms: float
    freed_mib: float              # device memory the suspend gave back
    exact: bool


class BenchServer:
    def __init__(self, directory: Path, name: str, backend: str):
        self.socket = directory / f"{name}.sock"
        self.log = open(directory / f"{name}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "tally.cli.server_main", "--backend", backend,
                                      "--socket", str(self.socket)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tally-server did not start; see {directory / (name + '.log')}")
            time.sleep(0.05)

    def status(self) -> dict:
        return query_status(self.socket, timeout=30)

    def request(self, kind: int, payload: bytes) -> float:
        started = time.perf_counter()
        reply = send(self.socket, kind, payload, timeout=600)
        wall_ms = (time.perf_counter() - started) * 1000
        if not reply.ok:
            raise RuntimeError(bytes(reply.tail).decode(errors="replace"))
        return wall_ms

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def memcpy_ms(nbytes: int) -> float:
    source = bytearray(os.urandom(1 << 20)) * (nbytes >> 20)
    started = time.perf_counter()
    bytearray(source)
    return (time.perf_counter() - started) * 1000


def only_client(server: BenchServer) -> int:
    deadline = time.monotonic() + 60
    while True:
        clients = server.status()["clients"]
        if len(clients) == 1:
            return clients[0]["client_id"]
        if time.monotonic() > deadline:
            raise RuntimeError(f"expected one job on {server.socket}, found {len(clients)}")
        time.sleep(0.05)


def measure(a: BenchServer, b: BenchServer, program: Path, mib: int) -> Row:
    job = subprocess.Popen([sys.executable, "-m", "tally.cli.run_main", "--server", str(a.socket), "--",
                            str(program), str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if job.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {mib} MiB job did not start")
        cid = only_client(a)
        before = a.status()["server"]["memory_free"]
        suspend_wall = a.request(ClientSuspend.KIND, ClientSuspend(client_id=cid).encode())
        freed = a.status()["server"]["memory_free"] - before
        resume_wall = a.request(ClientResume.KIND, ClientResume(client_id=cid).encode())
        record_a = a.status()["server"]["mobility"]
        migrate_wall = a.request(ClientMigrate.KIND, ClientMigrate(client_id=cid, tail=str(b.socket).encode()).encode())
        migrate_ms = a.status()["server"]["mobility"]["last_migration_ms"]
        b.request(ClientMigrate.KIND, ClientMigrate(client_id=only_client(b), tail=str(a.socket).encode()).encode())
        back_ms = b.status()["server"]["mobility"]["last_migration_ms"]
        out, _ = job.communicate("go\n", timeout=600)
        exact = job.returncode == 0 and "wrong=0" in out
        return Row(mib, round(memcpy_ms(mib * MIB), 2), record_a["last_suspend_ms"], record_a["last_resume_ms"],
                   migrate_ms, back_ms, round(suspend_wall, 2), round(resume_wall, 2), round(migrate_wall, 2),
                   round(freed / MIB, 2), exact)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def run_migrate_bench(footprints_mib=DEFAULT_FOOTPRINTS_MIB, backend: str = "emulator") -> list[Row]:
    program = build_cuda_job("resident_memory.cu")
    with tempfile.TemporaryDirectory(prefix="tally-bench-migrate-") as directory:
        a = BenchServer(Path(directory), "a", backend)
        b = BenchServer(Path(directory), "b", backend)
        try:
            return [measure(a, b, program, mib) for mib in footprints_mib]
        finally:
            a.stop()
            b.stop()


def table(rows: list[Row]) -> str:
    header = ("| footprint | host memcpy | suspend | resume | migrate A->B | migrate B->A | suspend (wall) | "
              "resume (wall) | migrate (wall) | freed | exact |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        lines.append(f"| {r.footprint_mib} MiB | {r.memcpy_ms:.1f} ms | {r.suspend_ms:.1f} ms | {r.resume_ms:.1f} ms | "
                     f"{r.migrate_ms:.1f} ms | {r.migrate_back_ms:.1f} ms | {r.suspend_wall_ms:.1f} ms | "
                     f"{r.resume_wall_ms:.1f} ms | {r.migrate_wall_ms:.1f} ms | {r.freed_mib:.1f} MiB | "
                     f"{'yes' if r.exact else 'NO'} |")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r.footprint_mib for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, values in (("suspend", [r.suspend_ms for r in rows]), ("resume", [r.resume_ms for r in rows]),
                          ("migrate A->B", [r.migrate_ms for r in rows]),
                          ("host memcpy (baseline)", [r.memcpy_ms for r in rows])):
        ax.plot(x, values, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("job's device footprint (MiB)")
    ax.set_ylabel("time (ms, server-side)")
    ax.set_title("tally: suspend, resume and migration time vs footprint")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(rows: list[Row], json_path: Path | None, png_path: Path | None) -> None:
    if json_path:
        json_path.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    if png_path:
        plot(rows, png_path)
