"""Suspend, resume and migration on a real GPU with `tally-server --backend cuda
--suspendable` (tally/backends/cuda_restore.py, cuda_globals.py), and what the
relocation of module variables costs kernels there. Run with `pytest -m gpu` on
a machine with an NVIDIA GPU and driver; deselected elsewhere. The same paths
run without a GPU, through tally's own driver, in
tests/test_cuda_backend_nested_suspend.py and test_cuda_backend_nested_migrate.py;
what only a GPU shows: that the driver honours cuMemAddressReserve's address
hint in a second process on the same GPU, that it JIT-compiles the relocated
PTX, and the kernels' time."""
from __future__ import annotations

import subprocess
import sys

import pytest
from e2e_helpers import Server, build_cuda, finish, run_job, start_job

from tally.backends.registry import real_driver_present

pytestmark = pytest.mark.gpu

MIB = 1 << 20
GRANULARITY = 2 << 20
EXACT = [0, 0, 0, 0, 400]


@pytest.fixture
def gpu_servers():
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    servers = [Server("cuda", ("--suspendable",)), Server("cuda", ("--suspendable",))]
    yield servers
    for server in servers:
        server.stop()


def control(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tally.cli.server_main", *args, "--socket", str(server.socket)],
                          capture_output=True, text=True, timeout=120)


def test_suspend_frees_module_globals_and_resume_is_exact(nvcc, gpu_servers):
    server = gpu_servers[0]
    job = start_job(server.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    (client,) = server.status()["clients"]
    before = server.status()["server"]["memory_free"]
    r = control(server, "suspend", "--client", str(client["client_id"]))
    assert r.returncode == 0, r.stdout + r.stderr
    (client,) = server.status()["clients"]
    assert client["suspended_bytes"] == 16 * MIB + 2 * 64 * 1024 + 4 + 1024     # g_round, g_seen included
    assert server.status()["server"]["memory_free"] - before >= 16 * MIB + 3 * GRANULARITY
    assert control(server, "resume", "--client", str(client["client_id"])).returncode == 0
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job, timeout=120)
    assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == EXACT, result.stdout


def test_migration_between_two_servers_on_one_gpu(nvcc, gpu_servers):
    a, b = gpu_servers
    job = start_job(a.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    (on_a,) = a.status()["clients"]
    r = control(a, "migrate", "--client", str(on_a["client_id"]), "--to", str(b.socket))
    assert r.returncode == 0, r.stdout + r.stderr
    (on_b,) = b.status()["clients"]
    job.stdin.write("go\n")
    job.stdin.flush()
    r = control(b, "migrate", "--client", str(on_b["client_id"]), "--to", str(a.socket))
    assert r.returncode == 0, r.stdout + r.stderr
    result = finish(job, timeout=120)
    assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == EXACT, result.stdout
    assert not b.status()["clients"]


def test_what_relocated_variables_cost_kernels(nvcc):
    # The same program on a plain cuda server (variables where the driver puts them) and a
    # --suspendable one (relocated: __constant__ taps read through the read-only path, the
    # __device__ table through the address table): identical results; the times are
    # printed for docs/cuda-globals.md and bounded loosely.
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    program = build_cuda(nvcc, "globals_timing.cu")
    runs = {}
    for name, flags in (("plain", ()), ("suspendable", ("--suspendable",))):
        server = Server("cuda", flags)
        try:
            job = run_job(server.socket, program, priority="high")
        finally:
            server.stop()
        assert job.returncode == 0, job.stdout + job.stderr
        runs[name] = job
    print({name: job.stdout.strip() for name, job in runs.items()})
    for key in ("filter_sum", "key_sum", "lookups"):
        assert runs["plain"].value(key) == runs["suspendable"].value(key), key
    for key in ("filter_ms", "lookup_ms"):
        assert float(runs["suspendable"].value(key)) <= 1.5 * float(runs["plain"].value(key)), key
