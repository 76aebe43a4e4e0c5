"""`tally-bench chaos`: a high-priority job keeps checking its own answers while
best-effort jobs around it are killed (SIGKILL, SIGTERM, SIGINT) or evicted at
random points: mid-allocation, mid-copy, mid-kernel, mid-graph.

Each round starts one best-effort job (tally/bench/jobs/chaos_victim.cu, which
announces each phase before it starts it), draws an action, a phase and a delay
from the seeded generator, waits for that phase's announcement, waits the delay
and strikes. Then it waits for the server to let the job go and records what
the server holds: device memory in use against the baseline taken before the
first round, shared-memory objects left in /dev/shm by the server or the dead
job, and the server's resident memory. The checks over the whole campaign are
in chaos_checks.py.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tally import paths, protocol
from tally.bench.chaos_checks import check_campaign
from tally.bench.process_group import JobFailed, Managed, ProcessGroup, wait_for
from tally.bench.process_jobs import build_cuda_job
from tally.cli import commands
from tally.cli.server_main import query_status
from tally.server.segments import SHM_DIR

PHASES = ("alloc", "copy", "kernel", "graph")
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}
EVICT = "evict"
EX_TEMPFAIL = 75                 # tally-run's exit status for an evicted job (issue 15, contract 4)
RELEASE_TIMEOUT_S = 120.0        # a job's work already on the emulator finishes before its memory is freed
SHM_SETTLE_S = 5.0               # how long a name found right after the release may take to go


def eviction_available() -> bool:
    """Whether this tally has `tally-server evict` (the ClientEvict control request)."""
    return "ClientEvict" in protocol.CODECS


@dataclass(frozen=True)
class ChaosConfig:
    rounds: int = 100
    backend: str = "emulator"           # emulator: real kernels on the CPU; null: bookkeeping only
    seed: int = 0
    # after the phase's announcement, uniform in [0, max_delay_s]: each phase of the
    # victim lasts ~10-40 ms on the emulator, so most strikes land inside the phase aimed at
    max_delay_s: float = 0.015
    victim_elements: int = 1 << 14
    victim_spin: int = 128
    service_elements: int = 2048
    actions: tuple[str, ...] = ()       # () = every signal, and eviction when this tally has it
    phases: tuple[str, ...] = PHASES    # the phases strikes are aimed at
    server_args: tuple[str, ...] = ()

    def validate(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {self.rounds}")
        if self.backend not in ("emulator", "null"):
            raise ValueError(f"--backend {self.backend}: chaos runs on emulator or null")
        unknown = [a for a in self.actions if a not in (*SIGNALS, EVICT)]
        if unknown:
            raise ValueError(f"unknown action(s) {', '.join(unknown)}; choose from {', '.join((*SIGNALS, EVICT))}")
        if not self.phases or any(p not in PHASES for p in self.phases):
            raise ValueError(f"--phases must name some of {', '.join(PHASES)}, got {', '.join(self.phases) or 'none'}")
        if EVICT in self.actions and not eviction_available():
            raise ValueError("this tally has no `tally-server evict`; leave evict out of --actions")

    def chosen_actions(self) -> tuple[str, ...]:
        return self.actions or (*SIGNALS, *((EVICT,) if eviction_available() else ()))


@dataclass
class Round:
    index: int
    action: str
    target_phase: str
    delay_s: float
    struck_in: str = ""              # the last phase the job announced before the strike
    exit_status: int | None = None
    release_s: float = 0.0           # strike to the server having let the job go
    leaked_bytes: int = 0            # device memory in use minus the baseline, once released
    shm_left: list[str] = field(default_factory=list)      # still there SHM_SETTLE_S after the release
    shm_lingered: list[str] = field(default_factory=list)  # there at the release, gone within SHM_SETTLE_S
    server_rss_bytes: int = 0
    server_threads: int = 0
    # the C allocator inside the server (`tally-server status`'s host_memory): what it
    # holds from the system and what of it is in use; RSS minus these is Python's
    # own arenas, thread stacks, code and the mapped segments
    server_malloc_system_bytes: int = 0
    server_malloc_in_use_bytes: int = 0
    server_arenas: int = 0
    service_running: bool = True
    note: str = ""


class _Campaign:
    def __init__(self, config: ChaosConfig, group: ProcessGroup, workdir: Path, socket_path: Path):
        self.config, self.group, self.workdir, self.socket = config, group, workdir, socket_path
        self.rng = random.Random(config.seed)
        self.tally_run = [*commands.tool("tally-run"), "--server", str(socket_path)]
        self.victim = [str(build_cuda_job("chaos_victim.cu")), "--elements", str(config.victim_elements),
                       "--spin", str(config.victim_spin)]
        self.server: Managed | None = None
        self.victim_pids: list[int] = []
        self.service: Managed | None = None

    def status(self) -> dict:
        return query_status(self.socket, timeout=30.0)

    def start_server(self) -> None:
        argv = [*commands.tool("tally-server"), "--backend", self.config.backend, "--socket", str(self.socket),
                *self.config.server_args]
        self.server = self.group.start(f"tally-server --backend {self.config.backend}", argv, "server.log")
        wait_for(self.socket.exists, 60.0, self.server, "listening on its socket")

    def start_service(self) -> Path:
        stop, ready, out = (self.workdir / n for n in ("service.stop", "service.ready", "service.json"))
        argv = [*self.tally_run, "--priority", "high", "--", str(build_cuda_job("chaos_service.cu")),
                "--stop", str(stop), "--ready", str(ready), "--out", str(out),
                "--elements", str(self.config.service_elements)]
        self.service = self.group.start("the high-priority service", argv, "service.log")
        wait_for(ready.exists, 120.0, self.service, "allocating its buffers", also=(self.server,))
        return stop

    def warm_up(self) -> None:
        """One victim cycle to its end before the baseline: the first job of a kind
        fills caches that stay (its lowered kernels, the server's arenas), which is
        no leak."""
        job = self.group.start("the warm-up job", [*self.tally_run, "--", *self.victim, "--cycles", "1"],
                               "warmup.log")
        if job.wait(120.0) != 0:
            raise job.failure(f"exited with status {job.proc.returncode}")
        wait_for(lambda: _attached(self.status()) == 1, RELEASE_TIMEOUT_S, self.server, "letting it go")

    def in_use(self) -> int:
        server = self.status()["server"]
        return server["memory_total"] - server["memory_free"]

    def run_round(self, index: int, baseline: int) -> Round:
        actions = self.config.chosen_actions()
        r = Round(index, self.rng.choice(actions), self.rng.choice(self.config.phases),
                  round(self.rng.uniform(0.0, self.config.max_delay_s), 4))
        log = f"victim{index:03d}.log"
        victim = self.group.start(f"best-effort job {index}", [*self.tally_run, "--", *self.victim], log)
        marker = f"phase={r.target_phase} "
        try:
            wait_for(lambda: marker in _read(victim.log_path), 120.0, victim, f"announcing {r.target_phase}",
                     also=(self.server,))
        except JobFailed as e:
            r.note = f"the job ended before its {r.target_phase} phase: {str(e).splitlines()[0]}"
            victim.stop(grace=5.0)
            r.exit_status = victim.proc.returncode
            return self._after(r, self._job_pid(victim), baseline, time.monotonic())
        job_pid = self._job_pid(victim)
        time.sleep(r.delay_s)
        r.struck_in = _last_phase(_read(victim.log_path))
        struck = time.monotonic()
        if r.action == EVICT:
            self._evict(job_pid, index)
        else:
            victim.proc.send_signal(SIGNALS[r.action])   # to tally-run, as a user or an orchestrator would
        try:
            r.exit_status = victim.proc.wait(60.0)
        except subprocess.TimeoutExpired:
            r.note = f"still running 60 s after {r.action}; killed"
            victim.stop(grace=1.0)
            r.exit_status = victim.proc.returncode
        return self._after(r, job_pid, baseline, struck)

    def _job_pid(self, victim: Managed) -> int:
        """The job's own pid, as the server knows it: tally-run's when tally-run
        became the job (exec), else that of its child."""
        self.victim_pids.append(victim.pid)
        for client in self.status()["clients"]:
            if client["pid"] != victim.pid and _parent(client["pid"]) == victim.pid:
                self.victim_pids.append(client["pid"])
                return client["pid"]
        return victim.pid

    def _evict(self, job_pid: int, index: int) -> None:
        client = next((c for c in self.status()["clients"] if c["pid"] == job_pid), None)
        if client is None:      # not attached (yet or any more): nothing to evict
            return
        subprocess.run([*commands.tool("tally-server"), "evict", "--socket", str(self.socket), "--client",
                        str(client["client_id"]), "--reason", f"tally-bench chaos round {index}"],
                       capture_output=True, text=True, timeout=60, check=False)

    def _after(self, r: Round, job_pid: int, baseline: int, struck: float) -> Round:
        gone = lambda: _attached(self.status()) == 1   # noqa: E731  (the service alone)
        try:
            wait_for(gone, RELEASE_TIMEOUT_S, self.server, "letting the job go", poll=0.05)
        except JobFailed as e:
            r.note = (r.note + "; " if r.note else "") + str(e).splitlines()[0]
        r.release_s = round(time.monotonic() - struck, 3)
        r.leaked_bytes = self.in_use() - baseline
        found = shm_objects(self.server.pid, job_pid)
        deadline = time.monotonic() + SHM_SETTLE_S
        while found and time.monotonic() < deadline:
            time.sleep(0.05)
            r.shm_left = shm_objects(self.server.pid, job_pid)
            if not r.shm_left:
                break
        r.shm_lingered = sorted(set(found) - set(r.shm_left))
        r.server_rss_bytes = rss_bytes(self.server.pid)
        r.server_threads = proc_status(self.server.pid, "Threads")
        host = self.status()["server"].get("host_memory") or {}
        r.server_malloc_system_bytes = host.get("system_bytes", 0)
        r.server_malloc_in_use_bytes = host.get("in_use_bytes", 0)
        r.server_arenas = len(host.get("arenas", ()))
        r.service_running = self.service.running()
        return r


def run_chaos(config: ChaosConfig, keep_workdir: bool = False, progress=None) -> dict:
    """The campaign's report (JSON-ready): config, every round, the checks."""
    config.validate()
    workdir = Path(tempfile.mkdtemp(prefix="chaos-", dir=paths.made_runtime_dir()))
    started = time.time()
    try:
        with ProcessGroup(workdir) as group:
            campaign = _Campaign(config, group, workdir, workdir / "server.sock")
            campaign.start_server()
            idle_in_use = campaign.in_use()
            stop = campaign.start_service()
            campaign.warm_up()
            baseline = campaign.in_use()
            rounds = []
            for i in range(config.rounds):
                rounds.append(campaign.run_round(i, baseline))
                if progress:
                    progress(rounds[-1])
            stop.touch()
            service_status = campaign.service.wait(120.0)
            service = _service_report(workdir / "service.json")
            wait_for(lambda: _attached(campaign.status()) == 0, RELEASE_TIMEOUT_S,
                     campaign.server, "letting the service go")
            final = {"in_use_bytes": campaign.in_use() - idle_in_use,
                     "shm_left": shm_objects(campaign.server.pid, *campaign.victim_pids),
                     "server_rss_bytes": rss_bytes(campaign.server.pid),
                     "server_running": campaign.server.running()}
            server_log = campaign.server.log_path.read_text(errors="replace")
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {"config": asdict(config), "actions": list(config.chosen_actions()),
              "seconds": round(time.time() - started, 1), "baseline_in_use_bytes": baseline - idle_in_use,
              "rounds": [asdict(r) for r in rounds],
              "service": {**service, "exit_status": service_status}, "final": final,
              "server_log_errors": server_log_errors(server_log),
              "workdir": str(workdir) if keep_workdir else None}
    report["checks"] = check_campaign(report)
    return report


def server_log_errors(log: str) -> list[str]:
    """The server log's crash lines: a traceback whole (its frames and the exception
    line, so a report says what failed), and each "crashed" or CRITICAL line."""
    errors, lines, i = [], log.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if "Traceback" in line:
            block = [line]
            i += 1
            while i < len(lines) and (lines[i][:1].isspace() or not lines[i].strip()):
                block.append(lines[i])
                i += 1
            if i < len(lines):
                block.append(lines[i])         # the exception itself
            errors.append("\n".join(block))
        elif "crashed" in line or " CRITICAL " in line:
            errors.append(line)
        i += 1
    return errors


def _attached(status: dict) -> int:
    """Jobs attached, counting those still being let go (one victim at a time runs
    next to the service, so 1 means the victim is gone and released)."""
    return len(status["clients"]) + status["server"]["clients_leaving"]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2:].split()[1])


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _last_phase(output: str) -> str:
    phases = [line.split()[0][len("phase="):] for line in output.splitlines() if line.startswith("phase=")]
    return phases[-1] if phases else ""


def _service_report(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"iterations": 0, "wrong": None}


def shm_objects(server_pid: int, *job_pids: int) -> list[str]:
    """Names in /dev/shm of the server's segments and the jobs' pinned memory."""
    prefixes = (f"tally-{server_pid}-", *(f"tally-pin-{p}-" for p in job_pids))
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefixes))
    except OSError:
        return []


def proc_status(pid: int, field: str) -> int:
    """A number from /proc/PID/status (its first word), 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (VmRSS), 0 once it is gone."""
    return proc_status(pid, "VmRSS") * 1024
