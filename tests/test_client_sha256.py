"""The client's SHA-256 (client_preload/src/jit_capture/sha256.cpp), which names the
cubin of each JIT-capture record it writes, against Python's hashlib: every length
around the block and padding boundaries, and long inputs."""
from __future__ import annotations

import hashlib
import os
import subprocess

from client_helpers import ROOT, SOURCES

CLIENT_SOURCES = ROOT / "client_preload" / "src"


def test_sha256_matches_hashlib(tmp_path):
    program = tmp_path / "sha256_digests"
    cxx = os.environ.get("CXX", "c++")
    subprocess.run([cxx, "-O2", "-std=c++17", "-Wall", "-Werror", f"-I{CLIENT_SOURCES}",
                    str(SOURCES / "sha256_digests.cpp"), str(CLIENT_SOURCES / "jit_capture" / "sha256.cpp"),
                    "-o", str(program)], check=True)
    data = os.urandom(1 << 20)
    (tmp_path / "data").write_bytes(data)
    lengths = [*range(0, 200), 447, 448, 511, 512, 4095, 4096, 65537, len(data)]
    done = subprocess.run([str(program), str(tmp_path / "data"), *map(str, lengths)], capture_output=True,
                          text=True, check=True)
    got = dict(line.split() for line in done.stdout.splitlines())
    assert len(got) == len(set(lengths))
    for n in lengths:
        assert got[str(n)] == hashlib.sha256(data[:n]).hexdigest(), n
