"""`tally-bench fuzz` with a small count against real servers (null: the
benchmark's default; emulator: every request really runs): no crash, every
request answered, every malformed one with an Error, every bad handshake refused
or hung up on, a good client still served, and all memory back at the end."""
from __future__ import annotations

import random
import socket
import subprocess
import sys

import pytest
from e2e_helpers import Server

from tally import protocol
from tally.bench import fuzz_handshakes
from tally.bench.fuzz_messages import MUTATIONS, TRAILING, mutated
from tally.bench.fuzz_soak import FuzzConfig, run_fuzz
from tally.server.handlers import HANDLERS

MESSAGES = 2000


@pytest.mark.parametrize("backend", ["null", "emulator"])
def test_a_small_soak_passes_every_check(backend):
    report = run_fuzz(FuzzConfig(messages=MESSAGES, handshakes=100, backend=backend, seed=1))
    assert all(c["passed"] for c in report["checks"]), report
    m = report["messages"]
    assert sum(sum(v.values()) for v in m["by_mutation"].values()) == MESSAGES
    for mutation in MUTATIONS:                 # the seed reaches every mutation, each answered
        assert sum(m["by_mutation"][mutation].values()) > 0, mutation
    assert m["malformed"] > MESSAGES // 5 and m["by_mutation"]["truncated"]["reply"] == 0
    assert m["by_mutation"]["fields"]["reply"] > 0           # some fuzzed requests are valid and succeed
    outcomes = report["handshakes"]["outcomes"]
    assert sum(outcomes.values()) == 100 and report["crash_count"] == 0
    assert outcomes.get("version: refused", 0) > 0 and outcomes.get("wrong-kind: hung up", 0) > 0


def test_the_mutations_are_what_they_say():
    rng = random.Random(5)
    for _ in range(200):
        r = mutated(rng, [0], TRAILING)
        c = protocol.codec(r.name)
        assert len(r.payload) > c.struct.size and r.malformed == (c.message.tail is None)
    for _ in range(50):
        r = mutated(rng, [0], "unknown-kind")
        assert r.malformed and r.kind not in HANDLERS and r.name == ""


def test_a_silent_server_is_reported_not_waited_for(tmp_path):
    # attempt() must call a peer that never answers SILENT, so a hung server fails the soak.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "mute.sock"))
    listener.listen(1)
    try:
        outcome = fuzz_handshakes.attempt(tmp_path / "mute.sock", "version", random.Random(0), timeout=0.5)
    finally:
        listener.close()
    assert outcome == fuzz_handshakes.SILENT


def test_every_handshake_mutation_gets_its_expected_answer():
    server = Server("null")
    try:
        rng = random.Random(2)
        for mutation, expected in fuzz_handshakes.EXPECTED.items():
            for _ in range(5):
                outcome = fuzz_handshakes.attempt(server.socket, mutation, rng)
                assert outcome in (expected,) if expected else outcome in ("refused", "accepted"), \
                    (mutation, outcome)
        assert server.alive()
    finally:
        server.stop()


def test_the_command_line_refuses_bad_counts():
    done = subprocess.run([sys.executable, "-m", "tally.cli.bench_main", "fuzz", "--messages", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr.startswith("tally-bench fuzz: --messages must be at least 1")
