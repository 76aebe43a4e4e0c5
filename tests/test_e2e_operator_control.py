"""Operator control of running jobs, end to end on the emulator: `tally-server set
--memory-quota` changes what a running job may allocate next and what
cuMemGetInfo shows it; `tally-server pause` holds an nvcc-compiled job's work
(its cudaDeviceSynchronize waits), and after `resume` its results are exact."""
from __future__ import annotations

import subprocess
import time

from e2e_helpers import build_cuda, build_driver_c, finish, job_command, job_env, server, tally_server

CUDA_ERROR_OUT_OF_MEMORY = 2
MIB = 1 << 20


def start(server, program, *args, quota: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(job_command(server.socket, program, *args, quota=quota), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=job_env())


def only_client(server) -> dict:
    (client,) = server.wait_for(lambda s: len(s["clients"]) == 1, what="the job to attach")["clients"]
    return client


def send_line(proc) -> None:
    proc.stdin.write("go\n")
    proc.stdin.flush()


def values(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in (token.split("=") for token in line.split())}


def test_set_memory_quota_changes_a_running_jobs_limit(server):
    job = start(server, build_driver_c("memory_limits.c"), "hold", "16", quota="64M")
    assert job.stdout.readline().strip() == "held=0"
    cid = str(only_client(server)["client_id"])
    r = tally_server(server, "set", "--client", cid, "--memory-quota", "24M")
    assert r.returncode == 0 and "memory quota 64.00 MiB -> 24.00 MiB" in r.stdout, r.stderr
    send_line(job)
    assert job.stdout.readline().strip() == f"alloc1={CUDA_ERROR_OUT_OF_MEMORY}"       # 16 + 16 > 24
    assert values(job.stdout.readline()) == {"info1_free": 8 * MIB, "info1_total": 24 * MIB}
    refused = tally_server(server, "set", "--client", cid, "--memory-quota", "8M")
    assert refused.returncode == 2 and "the job holds 16.00 MiB already" in refused.stderr
    assert tally_server(server, "set", "--client", cid, "--memory-quota", "128M").returncode == 0
    send_line(job)
    assert job.stdout.readline().strip() == "alloc2=0"
    assert values(job.stdout.readline()) == {"info2_free": 96 * MIB, "info2_total": 128 * MIB}
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "this job's memory quota is 24.00 MiB, 16.00 MiB in use" in result.stderr


def test_pause_holds_a_jobs_work_and_resume_keeps_its_results_exact(nvcc, server):
    job = start(server, build_cuda(nvcc, "paused_job.cu"))
    assert job.stdout.readline().strip() == "ready"
    cid = only_client(server)["client_id"]
    r = tally_server(server, "pause", "--client", str(cid))
    assert r.returncode == 0 and "paused" in r.stdout, r.stderr
    send_line(job)
    assert job.stdout.readline().strip() == "launched"
    # Its kernels take milliseconds here; paused, they stay queued and the synchronization waits.
    time.sleep(1.0)
    status = server.status()
    assert status["clients"][0]["state"] == "paused"
    assert status["server"]["scheduler"]["clients"][cid]["ops_queued"] == 8
    assert status["server"]["scheduler"]["clients"][cid]["kernels"] == 0
    assert job.poll() is None
    r = tally_server(server, "resume", "--client", str(cid))
    assert r.returncode == 0 and "resumed" in r.stdout, r.stderr
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["synced", "wrong=0"]
