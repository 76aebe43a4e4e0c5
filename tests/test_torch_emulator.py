"""PyTorch, unmodified, under tally-run against a tally-server on the CPU emulator.

Needs a CUDA build of PyTorch, which CI does not install (several GB): run with
`pytest -m torch`, naming its interpreter in TALLY_TORCH_PYTHON when it is not
the current one (e.g. a venv with `pip install torch`). PyTorch's wheels carry
SASS only and the emulator runs PTX, so the test covers everything short of
PyTorch's own kernels: cudart 13.2's initialization through tally's export
tables, device queries, the caching allocator, pageable, pinned and
device-to-device copies on two streams, events, a cuBLAS handle, a CUDA graph
captured and replayed (torch.cuda.graph), a Python thread that copies and
synchronizes, allocators, a CUDA tensor shared with
another process, and a kernel
refused with CUDA's "no kernel image" error after which the job carries on; and
a kernel of PyTorch's jiterator, which NVRTC compiles to a cubin whose PTX tally records.
Each of these found a bug in the client the first time it ran."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import PROGRAMS, Server, job_env

pytestmark = pytest.mark.torch


def torch_python() -> str:
    python = os.environ.get("TALLY_TORCH_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import torch; print(torch.version.cuda or '')"], capture_output=True,
                           text=True, timeout=300, check=False)
    if probe.returncode != 0 or not probe.stdout.strip():
        pytest.skip(f"{python} has no CUDA build of PyTorch; set TALLY_TORCH_PYTHON")
    return python


def test_pytorch_runs_under_tally_on_the_emulator():
    python = torch_python()
    # cuBLAS 13 ships PTX for compute_120 only (cuBLAS 13.1.1 with torch 2.14.1+cu130):
    # cublasCreate loads one of its modules, which an emulator at 9.0 cannot run.
    server = Server("emulator", extra_args=("--emulate-cc", "12.0"))
    try:
        job = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), "--",
                              python, str(PROGRAMS / "torch_on_emulator.py")], capture_output=True, text=True,
                             timeout=600, env=job_env(), check=False)
        assert job.returncode == 0, job.stdout + job.stderr
        got = json.loads(job.stdout.strip().splitlines()[-1])
        assert got == {
            "available": True, "device_count": 1, "name": "tally emulator", "capability": [12, 0],
            "mem_info_ok": True, "pageable_roundtrip": True, "pinned": True, "pinned_async_roundtrip": True,
            "elapsed_ms_ok": True, "allocated": True, "allocated_after_free": 0, "device_to_device": True,
            "kernel_error": "CUDA error: no kernel image is available for execution on the device",
            "after_kernel_error": True, "blas_handle": True, "graph_replays_good": 3,
            "worker_thread": {"ok": True},
        }, job.stderr
        assert server.alive()
    finally:
        server.stop()


# expandable_segments maps physical chunks into a reserved range (cuMemAddressReserve,
# cuMemCreate, cuMemMap, cuMemSetAccess). TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=0: with IPC
# on, PyTorch 2.15 asks NVML whether the GPU has fabric memory, and without an NVML
# library (no GPU driver here) it calls a null function pointer, with or without tally.
# cudaMallocAsync uses the stream-ordered allocator and asks for graph-memory statistics.
ALLOCATORS = {
    "expandable_segments": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                             "TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC": "0"}, "native"),
    "cudaMallocAsync": ({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, "cudaMallocAsync"),
}


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
def test_pytorch_allocators_under_tally(allocator):
    python = torch_python()
    settings, backend = ALLOCATORS[allocator]
    server = Server("emulator")
    try:
        job = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), "--",
                              python, str(PROGRAMS / "torch_allocator.py")], capture_output=True,
                             text=True, timeout=600, env={**job_env(), **settings}, check=False)
        assert job.returncode == 0, job.stdout + job.stderr
        assert "not supported" not in job.stderr, job.stderr
        got = json.loads(job.stdout.strip().splitlines()[-1])
        assert got["roundtrips"] == [True, True, True] and got["after_reuse"] and got["stats"], got
        assert got["backend"] == backend, got
        if allocator == "expandable_segments":
            assert got["reserved_mib"] >= 52 and got["reserved_after_empty_cache"] == 0, got
        status = server.wait_for(lambda s: not s["clients"] and not s["server"]["clients_leaving"], what="the job to go")
        assert status["server"]["memory_free"] == status["server"]["memory_total"]
    finally:
        server.stop()


def test_pytorch_shares_a_cuda_tensor_with_another_process():
    # torch.multiprocessing: the spawned consumer is a second job of the same server,
    # opening the producer's allocation and event by their IPC handles.
    python = torch_python()
    server = Server("emulator")
    try:
        job = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), "--",
                              python, str(PROGRAMS / "torch_multiprocessing.py")], capture_output=True,
                             text=True, timeout=600, env=job_env(), check=False)
        assert job.returncode == 0, job.stdout + job.stderr
        assert "not supported" not in job.stderr, job.stderr
        got = json.loads(job.stdout.strip().splitlines()[-1])
        assert got == {"consumer_saw_the_tensor": True, "consumer_exit": 0}, got
        status = server.wait_for(lambda s: not s["clients"] and not s["server"]["clients_leaving"], what="both processes to go")
        assert status["server"]["memory_free"] == status["server"]["memory_total"]
    finally:
        server.stop()


def test_the_compiled_training_job_of_the_gpu_kit_checks_itself_on_the_cpu(tmp_path):
    """tally.bench.jobs.torch_train --compile (the gpu-check jit-capture step's best-effort
    job) on the CPU: torch.compile'd training whose first loss equals the eager CPU's and
    falls; the job's own check says so."""
    python = torch_python()
    root = Path(__file__).resolve().parent.parent
    job = subprocess.run([python, "-m", "tally.bench.jobs.torch_train", "--model", "bert-base", "--layers", "1",
                          "--hidden", "64", "--heads", "2", "--seq", "16", "--batch", "2", "--device", "cpu",
                          "--compile", "--max-steps", "12", "--out", str(tmp_path / "r.json"), "--stop",
                          str(tmp_path / "stop"), "--ready", str(tmp_path / "ready")], capture_output=True,
                         text=True, timeout=600, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "bert-base (torch.compile) batch 2 on cpu" in job.stdout and "results correct" in job.stdout
    assert json.loads((tmp_path / "r.json").read_text())["job"] == "torch-bert-base-train-compiled"


def test_a_jiterator_kernel_runs_on_the_emulator_through_nvrtc_capture(tmp_path):
    """torch.cuda.jiterator compiles its kernel with NVRTC for the device's own architecture
    and loads the cubin; on the emulator (PTX only) it runs from the PTX tally's client
    recorded for it. A second job loads the cubin from PyTorch's kernel cache without
    compiling, and its record (found by the cubin's bytes) still comes with it."""
    python = torch_python()
    server = Server("emulator", extra_args=("--emulate-cc", "12.0"))
    kernels = tmp_path / "torch-kernels"
    kernels.mkdir()          # PyTorch makes no parents for its kernel cache
    env = {**job_env(), "XDG_CACHE_HOME": str(tmp_path / "cache-home"), "PYTORCH_KERNEL_CACHE_PATH": str(kernels)}
    try:
        for _ in range(2):
            job = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), "--",
                                  python, str(PROGRAMS / "torch_jiterator.py")], capture_output=True, text=True,
                                 timeout=600, env=env, check=False)
            assert job.returncode == 0, job.stdout + job.stderr
            got = json.loads(job.stdout.strip().splitlines()[-1])
            assert got == {"bad": 0, "bad_alpha": 0, "bad_again": 0, "cached_kernels": 1}, job.stderr
        records = list((tmp_path / "cache-home" / "tally" / "jit-ptx").glob("*.rec"))
        assert len(records) == 1 and b"producer nvrtc" in records[0].read_bytes()
        assert server.alive()
    finally:
        server.stop()
