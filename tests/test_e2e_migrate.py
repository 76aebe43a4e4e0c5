"""Migrating a running job between two tally-servers on the emulator
(`tally-server migrate --client ID --to SOCKET`): an nvcc-compiled job with a
CUDA graph, two streams and events moves A -> B while it waits, then B -> A in
the middle of its loop, and finishes with exact results; the server it left
holds nothing of it. A migration that cannot happen changes nothing: refused
up front (the target's quota is too small), or broken off because the target
is killed mid-transfer (the job runs on at the source, exact), or because the
source is killed mid-transfer (the target keeps nothing)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from e2e_helpers import (build_cuda, emulator_server_process, finish, go, idle, migrate, start_job,
                         suspended_job_exact, two_servers)

MIB = 1 << 20


def only_client(server) -> dict:
    (client,) = server.status()["clients"]
    return client


def test_a_to_b_and_back_keeps_results_exact(nvcc, two_servers):
    a, b = two_servers
    job = start_job(a.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    on_a = only_client(a)
    r = migrate(a, on_a["client_id"], b.socket)
    assert r.returncode == 0 and "migrated to" in r.stdout, r.stdout + r.stderr
    a.wait_for(idle, what="the source to free the migrated job's memory")
    on_b = only_client(b)
    assert on_b["pid"] == on_a["pid"] and on_b["memory_used"] == on_a["memory_used"] >= 16 * MIB
    assert a.status()["server"]["mobility"]["migrations"] == 1
    assert a.status()["server"]["mobility"]["last_migration_bytes"] >= 16 * MIB
    go(job)                                     # its loop goes on, on B; back to A in the middle of it
    r = migrate(b, on_b["client_id"], a.socket)
    assert r.returncode == 0 and "migrated to" in r.stdout, r.stdout + r.stderr
    b.wait_for(idle, what="B to free the job's memory")
    suspended_job_exact(finish(job))
    a.wait_for(idle, what="the job to finish on A")


def test_refused_up_front_when_the_target_quota_is_too_small(nvcc, two_servers):
    a, _ = two_servers
    small = emulator_server_process("--be-memory-quota", "8M")
    try:
        job = start_job(a.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
        assert job.stdout.readline().strip() == "looping"
        cid = only_client(a)["client_id"]
        r = migrate(a, cid, small.socket)
        assert r.returncode == 2 and "quota it would have here" in r.stderr and "stays here" in r.stderr, r.stderr
        nowhere = migrate(a, cid, small.dir / "nobody.sock")
        assert nowhere.returncode == 2 and "no tally-server answers" in nowhere.stderr
        assert only_client(a)["state"] == "running" and small.status()["clients"] == []
        go(job)
        suspended_job_exact(finish(job))
    finally:
        small.stop()


class KillingProxy:
    """Forwards one connection to `upstream`'s socket (descriptors passed along
    included) and SIGKILLs `victim` once `after` bytes went from the source to the
    target (the offer is smaller: its state was on its way). With `cut` it then
    closes both ends, as a dead server's sockets close; without, it goes on
    forwarding."""

    def __init__(self, path: Path, upstream: Path, victim: int, after: int, cut: bool = True):
        self.path, self.upstream, self.victim, self.after, self.cut = path, upstream, victim, after, cut
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self.killed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(str(self.upstream))
        threading.Thread(target=self._back, args=(up, conn), daemon=True).start()
        forwarded = 0
        while True:
            data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 4)
            if not data:
                break
            if fds:
                socket.send_fds(up, [data], fds)
                for fd in fds:
                    os.close(fd)
            else:
                up.sendall(data)
            forwarded += len(data)
            if forwarded >= self.after and not self.killed.is_set():
                os.kill(self.victim, signal.SIGKILL)
                self.killed.set()
                if self.cut:
                    break
        for end in (conn, up):        # as the dead server's own sockets would: closed at once
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    @staticmethod
    def _back(up, conn) -> None:
        try:
            while data := up.recv(1 << 16):
                conn.sendall(data)
        except OSError:
            pass


def test_target_killed_mid_transfer_leaves_the_job_running_at_the_source(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job = start_job(a.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    before = only_client(a)
    proxy = KillingProxy(tmp_path / "proxy.sock", b.socket, b.process.proc.pid, after=2048)
    r = migrate(a, before["client_id"], proxy.path)
    assert proxy.killed.is_set()
    assert r.returncode == 2 and "stays here" in r.stderr, r.stdout + r.stderr
    after = only_client(a)
    assert (after["client_id"], after["memory_used"], after["state"]) == (before["client_id"], before["memory_used"],
                                                                         "running")
    assert a.status()["server"]["mobility"]["migrations_failed"] == 1
    go(job)
    suspended_job_exact(finish(job))


def test_source_killed_mid_transfer_leaves_nothing_on_the_target(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job = start_job(a.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    free = b.status()["server"]["memory_free"]
    proxy = KillingProxy(tmp_path / "proxy.sock", b.socket, a.process.proc.pid, after=2048)
    migrate_cli = subprocess.Popen([sys.executable, "-m", "tally.cli.server_main", "migrate", "--client",
                                    str(only_client(a)["client_id"]), "--to", str(proxy.path), "--socket",
                                    str(a.socket)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    migrate_cli.communicate(timeout=120)
    assert proxy.killed.is_set() and not a.alive()
    b.wait_for(lambda s: not s["clients"] and s["server"]["memory_free"] == free,
               what="the target to undo the broken migration")
    assert b.alive()
    job.kill()
    job.wait(timeout=30)


def test_job_killed_mid_transfer_leaves_nothing_on_either_server(nvcc, two_servers, tmp_path):
    a, b = two_servers
    job = start_job(a.socket, build_cuda(nvcc, "suspended_job.cu"), "wait")
    assert job.stdout.readline().strip() == "looping"
    proxy = KillingProxy(tmp_path / "proxy.sock", b.socket, job.pid, after=2048, cut=False)
    r = migrate(a, only_client(a)["client_id"], proxy.path)
    assert proxy.killed.is_set() and job.wait(timeout=30) == -signal.SIGKILL
    # The transfer went on to its end; the job was gone on whichever side had it.
    assert r.returncode in (0, 2), r.stdout + r.stderr
    for server in (a, b):
        server.wait_for(idle, what="the killed job's release")
        assert server.alive()
