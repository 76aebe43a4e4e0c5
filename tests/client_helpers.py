"""Shared pieces of the client-library tests (tests/test_client_*.py): building the
C and CUDA test programs in tests/cuda/client/ (cached by content hash), running
them against our libcuda.so.1, and a tally-server (null backend) to talk to.

No tests live here; the module only holds helpers and fixtures the other
test_client_* modules import.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tally import paths

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "tests" / "cuda" / "client"
LIB_DIR = paths.LIB_DIR
CLIENT_LIBRARY = paths.CLIENT_LIBRARY
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
BUILD_CACHE = paths.cache_dir() / "client-test-programs"


def _cached_build(source: Path, command_for, suffix: str) -> Path:
    """Builds `source` with command_for(source, out) unless a binary built from the
    same source text and command already exists."""
    probe = command_for(source, Path("OUT"))
    key = hashlib.sha256(source.read_bytes() + "\0".join(map(str, probe)).encode()).hexdigest()[:20]
    out = BUILD_CACHE / f"{source.stem}-{key}{suffix}"
    if out.exists():
        return out
    BUILD_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = command_for(source, tmp)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"building {source.name} failed:\n{' '.join(map(str, cmd))}\n{result.stderr}")
    tmp.replace(out)
    return out


def build_c(name: str) -> Path:
    """A C program from tests/cuda/client/, linked against our libcuda.so.1 (-lcuda)
    the way a driver-API program links against the real driver."""
    if not CLIENT_LIBRARY.exists():
        pytest.fail(f"{CLIENT_LIBRARY} is missing: build it (tools/dev_build.sh or pip install -e .)")
    cc = os.environ.get("CC", "cc")

    def command(src: Path, out: Path) -> list:
        return [cc, "-O1", "-Wall", "-Werror", "-std=gnu11", f"-I{CUDA_HOME / 'include'}", str(src), "-o", str(out),
                f"-L{LIB_DIR}", "-lcuda", "-lpthread", "-ldl"]

    return _cached_build(SOURCES / name, command, "")


def build_cu(name: str, nvcc: str, shared_cudart: bool) -> Path:
    """A CUDA program from tests/cuda/client/ built by nvcc with static (nvcc's
    default) or shared cudart."""
    def command(src: Path, out: Path) -> list:
        cmd = [nvcc, "-O1", str(src), "-o", str(out)]
        if shared_cudart:
            cmd[1:1] = ["-cudart", "shared"]
        return cmd

    return _cached_build(SOURCES / name, command, "-shared" if shared_cudart else "-static")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    trace: str

    def lines(self, prefix: str) -> list[str]:
        """stdout lines starting with `prefix`, without it."""
        return [line[len(prefix):].strip() for line in self.stdout.splitlines() if line.startswith(prefix)]

    def value(self, key: str) -> str:
        found = self.lines(key + "=")
        assert found, f"program printed no {key}=...; stdout:\n{self.stdout}\nstderr:\n{self.stderr}"
        return found[-1]


def run_client(program: Path, *args, server: str | None = None, env: dict | None = None, preload: bool = True,
               trace: bool = True, timeout: float = 60) -> Run:
    """Runs `program` as tally-run would (our library first on LD_LIBRARY_PATH and
    LD_PRELOADed), with TALLY_CLIENT_TRACE going to a file whose text is returned."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("TALLY_") and k != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}
    e["LD_LIBRARY_PATH"] = ":".join(p for p in (str(LIB_DIR), str(CUDA_HOME / "lib64")) if p)
    if preload:
        e["LD_PRELOAD"] = str(CLIENT_LIBRARY)
    # A server that does not exist, unless the test names one: never a developer's real one.
    e["TALLY_SERVER"] = server or "/nonexistent/tally-test/server.sock"
    with tempfile.TemporaryDirectory(prefix="tally-trace-") as d:
        trace_file = Path(d) / "trace.txt"
        if trace:
            e["TALLY_CLIENT_TRACE"] = str(trace_file)
        e.update(env or {})
        r = subprocess.run([str(program), *map(str, args)], capture_output=True, text=True, env=e, timeout=timeout)
        text = trace_file.read_text() if trace_file.exists() else ""
    return Run(r.returncode, r.stdout, r.stderr, text)


class NullServer:
    """A real tally-server with the null backend on a private socket."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="tally-srv-"))
        self.socket = str(self.dir / "s.sock")
        self.log = self.dir / "server.log"
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tally.cli.server_main", "--backend", "null", "--socket", self.socket,
             "--log-level", "INFO"], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not Path(self.socket).exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"tally-server did not start:\n{self.log.read_text()}")
            time.sleep(0.05)

    def status(self) -> dict:
        from tally.cli.server_main import query_status
        return query_status(self.socket)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def null_server():
    server = NullServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shared_null_server():
    server = NullServer()
    yield server
    server.stop()
