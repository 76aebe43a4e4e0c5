"""Suspended jobs' host memory end to end on the emulator (tally/server/saved_memory.py):
under `--suspend-host-limit` (12 MiB: one buffer and a half) a job whose bytes do not compress is refused and
runs on unchanged, while a job whose bytes compress (a memset ballast) fits,
compressed; with `--suspend-spill-dir` the bytes beyond the limit go to disk and
come back exactly on resume."""
from __future__ import annotations


import pytest
from e2e_helpers import build_cuda, emulator_server_process, finish, start_job, tally_server

from tally.bench.process_jobs import build_cuda_job

MIB = 1 << 20


def only_client(server) -> dict:
    (client,) = server.status()["clients"]
    return client


def incompressible_job(server, nvcc: str, mib: int):
    job = start_job(server.socket, build_cuda_job("resident_memory.cu", nvcc), str(mib))
    assert job.stdout.readline().strip() == "ready"
    return job


def go_and_check(job) -> None:
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0 and "wrong=0" in result.stdout, result.stdout + result.stderr


@pytest.fixture
def limited():
    server = emulator_server_process("--suspend-host-limit", "12M")
    yield server
    server.stop()


def test_over_the_limit_a_job_is_refused_and_runs_on_while_a_compressible_one_fits(nvcc, limited):
    job = incompressible_job(limited, nvcc, 32)
    cid = only_client(limited)["client_id"]
    r = tally_server(limited, "suspend", "--client", str(cid))
    assert r.returncode == 2 and "--suspend-host-limit" in r.stderr and "runs on" in r.stderr, r.stdout + r.stderr
    status = limited.status()
    assert status["clients"][0]["state"] == "running" and status["server"]["mobility"]["saved_host_bytes"] == 0
    go_and_check(job)

    ballast = start_job(limited.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert ballast.stdout.readline().strip() == "looping"
    limited.wait_for(lambda s: len(s["clients"]) == 1, what="the first job to leave")
    cid = only_client(limited)["client_id"]
    r = tally_server(limited, "suspend", "--client", str(cid))
    assert r.returncode == 0, r.stdout + r.stderr
    mobility = limited.status()["server"]["mobility"]
    assert only_client(limited)["suspended_bytes"] > 16 * MIB > 4 * MIB > mobility["saved_host_bytes"] > 0
    assert tally_server(limited, "resume", "--client", str(cid)).returncode == 0
    ballast.stdin.write("go\n")
    ballast.stdin.flush()
    result = finish(ballast)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == [0, 0, 0, 0, 400]


def test_beyond_the_limit_bytes_spill_to_disk_and_come_back(nvcc, tmp_path):
    server = emulator_server_process("--suspend-host-limit", "12M", "--suspend-spill-dir", str(tmp_path))
    try:
        job = incompressible_job(server, nvcc, 32)
        cid = only_client(server)["client_id"]
        r = tally_server(server, "suspend", "--client", str(cid))
        assert r.returncode == 0 and "on disk" in r.stdout, r.stdout + r.stderr
        mobility = server.status()["server"]["mobility"]
        assert mobility["saved_host_bytes"] <= 12 * MIB and mobility["saved_spilled_bytes"] >= 24 * MIB
        assert list(tmp_path.iterdir()) == []          # unlinked: gone with the server whatever happens
        assert tally_server(server, "resume", "--client", str(cid)).returncode == 0
        assert server.status()["server"]["mobility"]["saved_spilled_bytes"] == 0
        go_and_check(job)
    finally:
        server.stop()
