"""`tally-bench demo`: tally's main job in one command.

Compiles two plain CUDA programs with nvcc (a small inference service and a
small training loop, tally/data/examples/), starts a tally-server for them
(the real GPU when there is one, else the CPU emulator), runs the training
job at best effort and the inference job at high priority at the same time,
both under tally-run, and shows what each printed and what the server saw.
Exits non-zero if either job fails or computes a wrong result.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tally import paths

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "examples"


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidate = Path(home) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else shutil.which("nvcc")


def compile_example(nvcc: str, name: str, out_dir: Path) -> Path:
    source = EXAMPLES / f"{name}.cu"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    binary = out_dir / f"{name}-{digest}"
    if not binary.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        subprocess.run([nvcc, "-O2", "-o", str(tmp), str(source)], check=True)
        tmp.rename(binary)
    return binary


def _tally_command(tool: str) -> list[str]:
    module = {"server": "tally.cli.server_main", "run": "tally.cli.run_main"}[tool]
    return [sys.executable, "-m", module]


def run_demo(backend: str = "auto", requests: int = 200, steps: int = 300) -> int:
    nvcc = find_nvcc()
    if nvcc is None:
        print("tally-bench demo: nvcc not found; install the CUDA toolkit or set CUDA_HOME", file=sys.stderr)
        return 2
    binaries = paths.cache_dir() / "demo"
    print(f"demo: compiling tally/data/examples/*.cu with {nvcc}", flush=True)
    inference = compile_example(nvcc, "inference", binaries)
    training = compile_example(nvcc, "training", binaries)
    with tempfile.TemporaryDirectory(prefix="tally-demo-") as tmp:
        socket_path = Path(tmp) / "server.sock"
        log_path = Path(tmp) / "server.log"
        with open(log_path, "w") as log:
            server = subprocess.Popen(_tally_command("server") + ["--backend", backend, "--socket", str(socket_path)],
                                      stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 60
            while not socket_path.exists():
                if server.poll() is not None or time.time() > deadline:
                    print(f"tally-bench demo: tally-server did not start:\n{log_path.read_text()}", file=sys.stderr)
                    return 2
                time.sleep(0.05)
            print(log_path.read_text().splitlines()[0], flush=True)
            run = _tally_command("run") + ["--server", str(socket_path)]
            be = subprocess.Popen(run + ["--priority", "best-effort", "--", str(training), str(steps)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            hp = subprocess.Popen(run + ["--priority", "high", "--", str(inference), str(requests)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            from tally.cli.server_main import format_status, query_status
            time.sleep(0.2)
            status = format_status(query_status(socket_path)) if hp.poll() is None else None
            hp_out, _ = hp.communicate()
            be_out, _ = be.communicate()
            print(f"high priority  (tally-run --priority high -- inference {requests}):\n  {hp_out.strip()}")
            print(f"best effort    (tally-run --priority best-effort -- training {steps}):\n  {be_out.strip()}")
            if status:
                print("tally-server status while both ran:\n" + "\n".join("  " + l for l in status.splitlines()))
            scheduler = query_status(socket_path)["server"].get("scheduler", {})
            print("scheduler: " + ", ".join(f"{k} {v}" for k, v in scheduler.items() if isinstance(v, int)))
        finally:
            server.terminate()
            server.wait(30)
    ok = hp.returncode == 0 and be.returncode == 0
    print("demo: both jobs computed correct results under tally" if ok else "demo: a job FAILED (see above)")
    return 0 if ok else 1
