"""Shareable virtual-memory handles between jobs of one tally-server (emulator):
physical memory one job exports as a POSIX file descriptor is imported and
mapped by another, which reads the owner's bytes and writes its own; the
properties, the access and a retained handle read back; what must fail fails
with CUDA's code and the reason; a job sharing physical memory is not suspended
(the other job holds the same bytes); everything is given back at the end."""
from __future__ import annotations

from e2e_helpers import build_driver_c, finish, idle, run_job, server, start_job, tally_server  # noqa: F401

CUDA_ERROR_INVALID_VALUE = 1


def exported(owner) -> dict:
    got = {}
    while "fd" not in got:
        line = owner.stdout.readline().strip()
        assert line, "the owner stopped before exporting: " + owner.stderr.read()
        for token in line.split():
            key, _, value = token.partition("=")
            got[key] = value
    return got


def share(server, while_shared=lambda owner: None):
    """The owner exports, the importer imports, maps, reads and writes; then
    `while_shared(owner)` runs before the owner checks the importer's bytes."""
    program = build_driver_c("vmm_sharing.c")
    owner = start_job(server.socket, program, "owner")
    got = exported(owner)
    assert (got["props_read_back"], got["access"], got["retained_same"]) == ("1", "3", "1")
    assert got["export_unshareable"] == str(CUDA_ERROR_INVALID_VALUE)
    importer = run_job(server.socket, program, "importer", got["pid"], got["fd"])
    assert importer.returncode == 0, importer.stdout + importer.stderr
    assert importer.ints("read_owners", "imported_done") == [1, 1]
    assert importer.value("import_not_an_export") == str(CUDA_ERROR_INVALID_VALUE)
    assert "is not physical memory exported by a job of tally-server" in importer.stderr
    while_shared(owner)
    owner.stdin.write("check\n")
    owner.stdin.flush()
    result = finish(owner)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("written_by_importer") == "1"
    server.wait_for(idle, what="the shared physical memory to be given back")


def test_physical_memory_shared_by_file_descriptor(server):
    share(server)


def test_a_job_that_shares_physical_memory_is_not_suspended(server):
    def refused(owner):
        (client,) = server.status()["clients"]
        r = tally_server(server, "suspend", "--client", str(client["client_id"]))
        assert r.returncode == 2 and "shares virtual-memory physical memory" in r.stderr, r.stdout + r.stderr
    share(server, refused)
