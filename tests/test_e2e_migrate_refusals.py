"""What a migration still refuses (tally/server/migration.py, README's limits):
jobs that share memory through IPC, the exporter and the job holding its
memory alike (the other job holds those addresses on this server), and a job
holding texture objects (its kernels hold their handles). `tally-server
migrate` exits 2 with the reason, the target keeps nothing, and both jobs go on
as if nothing was asked."""
from __future__ import annotations

from e2e_helpers import build_cuda, build_driver_c, finish, idle, migrate, start_job, tell, two_servers  # noqa: F401  (fixture)


def test_jobs_sharing_memory_through_ipc_stay_where_they_are(two_servers):
    a, b = two_servers
    program = build_driver_c("ipc.c")
    owner = start_job(a.socket, program, "owner")
    handles = dict(owner.stdout.readline().strip().partition("=")[::2] for _ in range(4))
    holder = start_job(a.socket, program, "holder", handles["mem_handle"])
    assert holder.stdout.readline().strip() == "held_first=22222222"
    before = {c["client_id"]: c for c in a.status()["clients"]}
    free_b = b.status()["server"]["memory_free"]
    for cid in before:
        r = migrate(a, cid, b.socket, timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "cannot move" in r.stderr and "IPC" in r.stderr, r.stderr
    after = {c["client_id"]: c for c in a.status()["clients"]}
    assert {cid: c["memory_used"] for cid, c in after.items()} == \
        {cid: c["memory_used"] for cid, c in before.items()}
    assert b.status()["clients"] == [] and b.status()["server"]["memory_free"] == free_b
    tell(owner, "free")
    assert owner.stdout.readline().strip() == "written_by_other=22222222"
    tell(holder, "again")
    held = finish(holder)
    assert held.returncode == 0 and held.value("held_after_owner_freed") == "22222222", held.stdout
    tell(owner, "exit")
    assert finish(owner).returncode == 0
    a.wait_for(idle, what="both jobs' memory to be given back")


def test_a_job_holding_a_texture_object_stays_where_it_is(two_servers, nvcc):
    a, b = two_servers
    job = start_job(a.socket, build_cuda(nvcc, "textures.cu"), "hold")
    assert job.stdout.readline().strip() == "held=1"
    [client] = a.status()["clients"]
    r = migrate(a, client["client_id"], b.socket, timeout=120)
    assert r.returncode == 2 and "1 texture or surface objects" in r.stderr, r.stdout + r.stderr
    assert b.status()["clients"] == []
    tell(job, "sample")
    held = finish(job)
    assert held.returncode == 0 and held.value("held_good") == "68", held.stdout + held.stderr
    a.wait_for(idle, what="the job's memory to be given back")
