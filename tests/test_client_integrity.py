"""The integrity-check export table (d4082055-...) cudart verifies the driver with.

Each version is checked against an independent computation: fixed values for
versions ending in 0 and 1, and for the others HMAC-MD2 computed here with
pycryptodome over the inputs the test program reports (process, thread, table
addresses, time, and the UUID and PCI ids the client reports for each device).
"""
from __future__ import annotations

import struct

import pytest
from Crypto.Hash import HMAC, MD2

from client_helpers import build_c, run_client, shared_null_server  # noqa: F401 (fixture)

KEY = bytes.fromhex("146addae53a9a752aa0841360bf55a9f")
FIXED = {0: (0x3341181C03CB675C, 0x8ED383AA1F4CD1E8), 1: (0x1841181C03CB675C, 0x8ED383AA1F4CD1E8)}
SECONDS = 1_795_000_000


def test_md2_oracle_matches_rfc1319():
    # The oracle itself, against the RFC's test vectors.
    assert MD2.new(b"").hexdigest() == "8350e5a3e24c153df2275c9f80692773"
    assert MD2.new(b"message digest").hexdigest() == "ab4f496bfb2a530b219ff33031fe06b0"


def run_checks(mode: str, *versions: int, server=None):
    run = run_client(build_c("integrity.c"), mode, SECONDS, *versions, server=server)
    assert run.returncode == 0, run.stderr
    results = {}
    for line in run.lines("check="):
        version, rc, lo, hi = line.split()
        results[int(version)] = (int(rc), int(lo, 16), int(hi, 16))
    return run, results


def expected_hash(run, version: int) -> tuple[int, int]:
    record = struct.pack("<IIIIQQQQ", int(run.value("driver_version")), version, int(run.value("pid")),
                         int(run.value("thread")), int(run.value("runtime_interface")),
                         int(run.value("integrity_table")), int(run.value("check_fn")), SECONDS)
    for device in run.lines("device="):
        uuid_hex, domain, bus, dev = device.split()
        record += bytes.fromhex(uuid_hex) + struct.pack("<iii", int(domain), int(bus), int(dev))
    digest = HMAC.new(KEY, record, digestmod=MD2).digest()
    return struct.unpack("<QQ", digest)


@pytest.mark.parametrize("version", [13000, 13001, 12080, 12091])
def test_versions_ending_in_0_or_1_answer_a_fixed_value(version):
    _, results = run_checks("noinit", version)
    rc, lo, hi = results[version]
    assert rc == 0
    assert (lo, hi) == FIXED[version % 10]


@pytest.mark.parametrize("version", [13002, 12082, 13005])
def test_other_versions_answer_hmac_md2_without_devices(version):
    run, results = run_checks("noinit", version)
    assert run.value("devices") == "0"
    rc, lo, hi = results[version]
    assert rc == 0
    assert (lo, hi) == expected_hash(run, version)


def test_hash_covers_the_devices_the_client_reports(shared_null_server):
    run, results = run_checks("init", 13000, 13001, 13002, server=shared_null_server.socket)
    assert run.value("init") == "0"
    assert run.value("devices") == "1"
    from tally.backends.null import NullBackend
    described = NullBackend().describe()
    uuid_hex, domain, bus, device = run.lines("device=")[0].split()
    assert bytes.fromhex(uuid_hex) == described.uuid
    assert (int(domain), int(bus), int(device)) == (described.pci_domain, described.pci_bus, described.pci_device)
    assert results[13000][1:] == FIXED[0] and results[13001][1:] == FIXED[1]
    assert results[13002][0] == 0
    assert results[13002][1:] == expected_hash(run, 13002)
    # The device record matters: the same call without it would hash differently.
    without = run.lines("device=")
    assert without and results[13002][1:] != _hash_without_devices(run, 13002)


def _hash_without_devices(run, version: int) -> tuple[int, int]:
    record = struct.pack("<IIIIQQQQ", int(run.value("driver_version")), version, int(run.value("pid")),
                         int(run.value("thread")), int(run.value("runtime_interface")),
                         int(run.value("integrity_table")), int(run.value("check_fn")), SECONDS)
    return struct.unpack("<QQ", HMAC.new(KEY, record, digestmod=MD2).digest())


def test_table_starts_with_its_size():
    # Padded to 64 slots like every private table (test_client_export_tables.py).
    run, _ = run_checks("noinit", 13000)
    assert run.value("table_size") == str(64 * 8)
