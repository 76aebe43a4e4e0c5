"""Exactly one server serves a migrating job, whatever message of its handover
is lost and whichever server dies (tally/server/handover.py). A proxy between
source (A) and target (B) stops at the handover of the job's socket and segment
(tests/migration_proxy.py), and each test loses or delays what follows there:

- B killed before it claims the job: A keeps it.
- B's answer to the commit lost while B serves: A reads from the segment that B
  took the job, frees everything of it and forgets it.
- B killed after claiming, before the job's next request: A takes the job back.
- B killed after it began serving: the job fails as with any dead server; A
  keeps nothing of it.
- The commit reaches B only after A kept the job: B's claim fails and B undoes.
- A killed right after the handover: B serves the job.

Every test runs an nvcc-compiled job (suspended_job.cu, waiting mid-loop) and
checks that the job is listed by exactly one live server, its results are exact
where a server kept its state, the other server holds none of its memory, and
no shared-memory name of the job or the servers is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from e2e_helpers import build_cuda, finish, go, idle, start_job, suspended_job_exact, two_servers
from migration_proxy import HandoverProxy


class Migration:
    """`tally-server migrate` from `source` through a proxy, run in the background."""

    def __init__(self, source, cid: int, to: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "tally.cli.server_main", "migrate", "--client", str(cid),
                                      "--to", str(to), "--socket", str(source.socket)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.result: tuple[int, str] | None = None
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        out, err = self.proc.communicate(timeout=180)
        self.result = (self.proc.returncode, out + err)

    def done(self) -> tuple[int, str]:
        self._thread.join(180)
        assert self.result is not None, "tally-server migrate did not end"
        return self.result


def waiting_job(nvcc, server):
    """The job, waiting mid-loop, with `client_pid`: the pid servers list it by (tally-run's child)."""
    job = start_job(server.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    (client,) = server.status()["clients"]
    job.client_pid = client["pid"]
    return job


def clients(server) -> list[dict]:
    return server.status()["clients"] if server.alive() else []


def served_by(server, job) -> dict:
    """The job is this server's, and its segment says this server serves it."""
    (client,) = [c for c in server.status()["clients"] if c["pid"] == job.client_pid]
    return client


def listed_once(job, *servers) -> None:
    holders = [s for s in servers if any(c["pid"] == job.client_pid for c in clients(s))]
    assert len(holders) == 1, f"the job is listed by {len(holders)} servers"


def no_names_left(job, *servers) -> None:
    """Nothing in /dev/shm of the job (pinned objects) or of the servers (segments)."""
    prefixes = (f"tally-pin-{job.client_pid}-", *(f"tally-{s.process.proc.pid}-" for s in servers))
    left = [n for n in os.listdir("/dev/shm") if n.startswith(prefixes)]
    assert left == [], left


def kill(server) -> None:
    server.process.proc.send_signal(signal.SIGKILL)
    server.process.proc.wait(timeout=30)


def owned(job, owner: str):
    """A status check: the job is listed with its segment saying `owner` ("claimed", "serving")."""
    return lambda s: any(c["pid"] == job.client_pid and c["segment_owner"] == owner for c in s["clients"])


def handing_over(nvcc, a, b, tmp_path):
    """A job waiting mid-loop on A, its migration to B under way and stopped at the
    handover of its socket and segment. Returns the job, A's record of it before,
    the proxy and the migration."""
    job = waiting_job(nvcc, a)
    before = served_by(a, job)
    proxy = HandoverProxy(tmp_path / "proxy.sock", b.socket)
    migration = Migration(a, before["client_id"], proxy.path)
    proxy.wait_handover()
    return job, before, proxy, migration


def kept_intact(a, job, before: dict) -> None:
    """A serves the job as before the migration: same id, same memory."""
    after = served_by(a, job)
    assert (after["client_id"], after["memory_used"], after["segment_owner"]) == \
        (before["client_id"], before["memory_used"], "serving")


def finishes_exact(job, server, where: str, *servers) -> None:
    """The job goes on, ends exact, `server` releases it, and no name is left in /dev/shm."""
    go(job)
    suspended_job_exact(finish(job))
    server.wait_for(idle, what=f"the job's release on {where}")
    no_names_left(job, *servers)


def test_target_killed_before_claiming_leaves_the_job_at_the_source(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job, before, proxy, migration = handing_over(nvcc, a, b, tmp_path)
    kill(b)                                    # its end of the connection closes: so does the source's
    proxy.keep_commit()
    rc, text = migration.done()
    assert rc == 2 and "stays here" in text, text
    kept_intact(a, job, before)
    finishes_exact(job, a, "A", a, b)


def test_lost_commit_answer_target_serves_and_source_forgets(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job, before, proxy, migration = handing_over(nvcc, a, b, tmp_path)
    proxy.drop_replies()
    proxy.forward_commit()
    b.wait_for(owned(job, "claimed"), what="B to claim the job")
    proxy.cut_source()                          # B's answer never comes
    rc, text = migration.done()
    assert rc == 0 and "migrated to" in text, text
    a.wait_for(idle, what="A to free the job it handed over")
    listed_once(job, a, b)
    assert served_by(b, job)["memory_used"] == before["memory_used"]
    finishes_exact(job, b, "B", a, b)


def test_target_killed_after_claiming_source_takes_the_job_back(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job, before, proxy, migration = handing_over(nvcc, a, b, tmp_path)
    proxy.drop_replies()
    proxy.forward_commit()
    b.wait_for(owned(job, "claimed"), what="B to claim the job")
    kill(b)                                    # claimed, and not a single request of the job handled
    proxy.cut_source()                         # the answer A waits for never comes
    rc, text = migration.done()
    assert rc == 2 and "stays here" in text, text
    kept_intact(a, job, before)
    assert a.status()["server"]["mobility"]["migrations_failed"] == 1
    finishes_exact(job, a, "A", a, b)


def test_target_killed_while_serving_fails_the_job_and_the_source_keeps_nothing(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job, _before, proxy, migration = handing_over(nvcc, a, b, tmp_path)
    proxy.drop_replies()
    proxy.forward_commit()
    b.wait_for(owned(job, "claimed"), what="B to claim the job")
    go(job)                                    # its next request makes B serve it
    b.wait_for(owned(job, "serving"), what="B to serve the job")
    kill(b)
    proxy.cut_source()
    rc, text = migration.done()
    assert rc == 0, text                       # the handover happened; B died after it
    result = finish(job)
    assert result.returncode != 0              # its device state died with B
    a.wait_for(idle, what="A to keep nothing of the job B served")
    no_names_left(job, a, b)


def test_commit_after_the_source_kept_the_job_is_undone_by_the_target(nvcc, two_servers, tmp_path):
    a, b = two_servers
    free = b.status()["server"]["memory_free"]
    job, _before, proxy, migration = handing_over(nvcc, a, b, tmp_path)
    proxy.cut_source()                          # A sees no answer and keeps the job ...
    rc, text = migration.done()
    assert rc == 2 and "stays here" in text, text
    assert served_by(a, job)["segment_owner"] == "serving"
    proxy.forward_commit()                      # ... then B gets the commit: its claim must fail
    b.wait_for(lambda s: not s["clients"] and not s["server"]["clients_leaving"]
               and s["server"]["memory_free"] == free, what="B to undo the import")
    listed_once(job, a, b)
    finishes_exact(job, a, "A", a, b)


def test_source_killed_after_the_handover_leaves_the_job_on_the_target(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job, _before, proxy, _migration = handing_over(nvcc, a, b, tmp_path)
    proxy.forward_commit()
    kill(a)
    b.wait_for(owned(job, "claimed"), what="B to claim the job")
    finishes_exact(job, b, "B", a, b)
