"""Shared pieces of the end-to-end tests (tests/test_e2e_*.py): CUDA programs from
tests/cuda/programs/ built by nvcc at test time (cached by content hash), a real
tally-server on a private socket, and jobs started with the real tally-run.

No tests live here; the module only holds helpers and fixtures.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from server_harness import ServerProcess

from tally import paths
from tally.cli.server_main import query_status

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "cuda" / "programs"
# what the programs include from their own folder: part of every program's cache key
HEADERS = sorted(PROGRAMS.glob("*.h"))
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
BUILD_CACHE = paths.cache_dir() / "e2e-programs"

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_ILLEGAL_ADDRESS = 700


def _cached(sources: list[Path], command_for, suffix: str) -> Path:
    """Runs command_for(out) unless an output built from the same sources and
    command exists already."""
    probe = command_for(Path("OUT"))
    digest = hashlib.sha256("\0".join(map(str, probe)).encode())
    for source in sources:
        digest.update(source.read_bytes())
    out = BUILD_CACHE / f"{sources[0].stem}-{digest.hexdigest()[:20]}{suffix}"
    if out.exists():
        return out
    BUILD_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = command_for(tmp)
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"building {out.name} failed:\n{' '.join(map(str, cmd))}\n{result.stderr}")
    tmp.replace(out)
    return out


def build_cuda(nvcc: str, *names: str, shared_cudart: bool = False, flags: tuple[str, ...] = ()) -> Path:
    """An executable from CUDA sources in tests/cuda/programs/, with static cudart
    (nvcc's default) or shared cudart, and extra nvcc flags."""
    sources = [PROGRAMS / n for n in names]

    def command(out: Path) -> list:
        cmd = [nvcc, "-O1", *flags, *map(str, sources), "-o", str(out)]
        if shared_cudart:
            cmd[1:1] = ["-cudart", "shared"]
        return cmd

    return _cached([*sources, *HEADERS], command, "-shared" if shared_cudart else "-static")


def build_device_code(nvcc: str, name: str, kind: str, flags: tuple[str, ...] = ()) -> Path:
    """PTX text (kind 'ptx') or a fatbin ('fatbin') of a .cu file, with extra nvcc flags."""
    source = PROGRAMS / name
    return _cached([source], lambda out: [nvcc, f"-{kind}", *flags, str(source), "-o", str(out)], f".{kind}")


def build_driver_c(name: str) -> Path:
    """A C program using the driver API, linked against tally's libcuda.so.1 as a
    driver-API program links against the real driver."""
    source = PROGRAMS / name
    cc = os.environ.get("CC", "cc")

    def command(out: Path) -> list:
        return [cc, "-O1", "-Wall", "-Werror", "-std=gnu11", f"-I{CUDA_HOME / 'include'}", str(source), "-o",
                str(out), f"-L{paths.LIB_DIR}", "-lcuda"]

    return _cached([source, *HEADERS, paths.CLIENT_LIBRARY], command, "")


@dataclass
class Job:
    returncode: int
    stdout: str
    stderr: str

    def value(self, key: str) -> str:
        """The value of the last `key=...` on a stdout line (the rest of that token)."""
        for line in reversed(self.stdout.splitlines()):
            for token in line.split():
                if token.startswith(key + "="):
                    return token[len(key) + 1:]
        raise AssertionError(f"the job printed no {key}=...\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}")

    def ints(self, *keys: str) -> list[int]:
        return [int(self.value(k), 0) for k in keys]


def cuda_wheel_home(header: str, library: str) -> Path | None:
    """The cu13 folder of NVIDIA's pip wheels (nvidia-cuda-nvrtc, nvidia-nvjitlink, ...) that
    holds include/<header> and lib/<library>, or None."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in map(Path, nvidia.__path__):
        if (root / "cu13" / "include" / header).is_file() and (root / "cu13" / "lib" / library).exists():
            return root / "cu13"
    return None


def jit_cache_env(tmp_path: Path) -> tuple[dict, Path]:
    """A job's environment with a cache home of its own, and the folder its JIT-capture
    records go to there."""
    home = tmp_path / "cache-home"
    return {"XDG_CACHE_HOME": str(home)}, home / "tally" / "jit-ptx"


def job_command(socket: Path, program: Path, *args, priority: str | None = None,
                quota: str | None = None, sm_percent: float | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "tally.cli.run_main", "--server", str(socket)]
    if priority:
        cmd += ["--priority", priority]
    if quota:
        cmd += ["--memory-quota", quota]
    if sm_percent is not None:
        cmd += ["--sm-percent", f"{sm_percent:g}"]
    return cmd + ["--", str(program), *map(str, args)]


def job_env() -> dict:
    # The job must find only tally's driver: no developer TALLY_* (or MPS share) settings leak in.
    return {k: v for k, v in os.environ.items()
            if not k.startswith("TALLY_") and k != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}


def run_job(socket: Path, program: Path, *args, timeout: float = 120, priority: str | None = None,
            quota: str | None = None, stdin: str | None = None, sm_percent: float | None = None,
            env: dict | None = None) -> Job:
    r = subprocess.run(job_command(socket, program, *args, priority=priority, quota=quota, sm_percent=sm_percent),
                       capture_output=True, text=True, timeout=timeout, env={**job_env(), **(env or {})},
                       input=stdin, check=False)
    return Job(r.returncode, r.stdout, r.stderr)


@dataclass
class BesideInference:
    best_effort: str       # the best-effort job's stdout and stderr, together
    scheduler: dict        # the server's scheduler counters once both jobs ended
    log: str               # the server's log


def best_effort_beside_inference(nvcc: str, tmp_path: Path, be_transform: str, program: Path, *args,
                                 timeout: float = 300, env: dict | None = None) -> BesideInference:
    """`program args` at best effort next to the demo's inference job (high priority), on an
    emulator server of its own run with --be-transform; the best-effort job and the inference
    job must both exit 0, and the inference job print "results correct". `env`: more of
    the best-effort job's environment."""
    from tally.bench.demo import compile_example
    inference = compile_example(nvcc, "inference", tmp_path)
    server = ServerProcess(tmp_path / "s.sock", backend="emulator", extra_args=("--be-transform", be_transform))

    def start(priority: str, *argv) -> subprocess.Popen:
        return subprocess.Popen(job_command(server.socket_path, *argv, priority=priority), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                env={**job_env(), **((env or {}) if priority == "best-effort" else {})})
    try:
        be = start("best-effort", program, *args)
        hp = start("high", inference, 100)
        hp_out, _ = hp.communicate(timeout=timeout)
        be_out, _ = be.communicate(timeout=timeout)
        assert hp.returncode == 0 and "results correct" in hp_out, hp_out
        assert be.returncode == 0, be_out
        return BesideInference(be_out, query_status(server.socket_path)["server"]["scheduler"], server.log())
    finally:
        server.stop()


def start_job(socket: Path, program: Path, *args, priority: str | None = None,
              sm_percent: float | None = None) -> subprocess.Popen:
    return subprocess.Popen(job_command(socket, program, *args, priority=priority, sm_percent=sm_percent),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
                            env=job_env())


def finish(proc: subprocess.Popen, timeout: float = 120) -> Job:
    out, err = proc.communicate(timeout=timeout)
    return Job(proc.returncode, out, err)


class Server:
    """A tally-server process on a private socket."""

    def __init__(self, backend: str, extra_args: tuple[str, ...] = ()):
        self.dir = Path(tempfile.mkdtemp(prefix="tally-e2e-"))
        self.socket = self.dir / "server.sock"
        self.process = ServerProcess(self.socket, backend=backend, extra_args=extra_args)

    def status(self) -> dict:
        return query_status(self.socket)

    def wait_for(self, predicate, timeout: float = 60, what: str = "the server's status") -> dict:
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if predicate(status):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; last status: {status}\n"
                                     f"server log:\n{self.process.log()[-4000:]}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.process.proc.poll() is None

    def stop(self) -> None:
        self.process.stop()


def python_that_imports(env_var: str, modules: str, install: str) -> str:
    """The interpreter named in `env_var` (else this one) when it can `import modules`;
    otherwise the calling opt-in test skips, saying how to get one."""
    python = os.environ.get(env_var, sys.executable)
    probe = subprocess.run([python, "-c", f"import {modules}"], capture_output=True, text=True, timeout=300,
                           check=False)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import {modules}; set {env_var} ({install})")
    return python


def emulator_server_process(*extra_args: str) -> Server:
    """A server on the CPU emulator (with these tally-server flags). The emulator is
    part of every build, so a missing one is a failure, never a skip."""
    try:
        import tally.backends.emulator  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the emulator backend does not import ({e}); rebuild with tools/dev_build.sh")
    return Server("emulator", extra_args)


@pytest.fixture(scope="module")
def emulator_server():
    server = emulator_server_process()
    yield server
    server.stop()


@pytest.fixture
def server():
    """An emulator server of its own for one test: for tests that read its status and
    memory totals (import it by name; module-wide tests use emulator_server)."""
    server = emulator_server_process()
    yield server
    server.stop()


def idle(status: dict) -> bool:
    """No client left (nor one still being released), and all device memory free."""
    server = status["server"]
    return not status["clients"] and not server["clients_leaving"] and server["memory_free"] == server["memory_total"]


@pytest.fixture
def two_servers():
    """Two emulator servers of one test, a migration's source and target."""
    a, b = emulator_server_process(), emulator_server_process()
    yield a, b
    a.stop()
    b.stop()


def tally_server(server, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """An operator's `tally-server <command> ...` against this server."""
    return subprocess.run([sys.executable, "-m", "tally.cli.server_main", *args, "--socket", str(server.socket)],
                          capture_output=True, text=True, timeout=timeout)


def migrate(source, cid: int, to, timeout: float = 180) -> subprocess.CompletedProcess:
    """`tally-server migrate --client CID --to TO` on the source server."""
    return tally_server(source, "migrate", "--client", str(cid), "--to", str(to), timeout=timeout)


def tell(job, line: str) -> None:
    """Writes one line to a job that reads its orders from stdin."""
    job.stdin.write(line + "\n")
    job.stdin.flush()


def go(job) -> None:
    """Lets a job waiting on its stdin (suspended_job.cu's "wait" mode) go on."""
    tell(job, "go")


def suspended_job_exact(result) -> None:
    """suspended_job.cu ended with every check passing and all 400 rounds run."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == [0, 0, 0, 0, 400]
