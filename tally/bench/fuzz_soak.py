"""`tally-bench fuzz`: a soak of mutated ring messages and handshakes against a
real tally-server.

Every ring message is a tagged request (fuzz_messages.mutated), so the server
owes each one exactly one answer: its reply, or an Error record. One client
sends them one at a time and waits for each answer; it reconnects every
RECONNECT_EVERY messages, so what the accepted requests created is given back
(and the emulator never holds gigabytes) and sessions come and go all soak long.
Then mutated handshakes (fuzz_handshakes), then a well-behaved client that must
still be served. The server's log must show no handler crash, and once every
client left all device memory must be free.
"""
from __future__ import annotations

import collections
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tally import paths, protocol
from tally.bench import fuzz_handshakes
from tally.bench.fuzz_messages import MUTATIONS, mutated
from tally.bench.process_group import ProcessGroup, wait_for
from tally.bench.wire_client import PyClient
from tally.cli import commands
from tally.cli.server_main import query_status

RECONNECT_EVERY = 5000
ANSWER_TIMEOUT_S = 30.0
HOST_FUNC_READY = protocol.codec("HostFuncReady").kind
ERROR = protocol.codec("Error").kind
MAX_ADDRESSES = 64


@dataclass(frozen=True)
class FuzzConfig:
    messages: int = 100_000
    handshakes: int = 1000
    backend: str = "null"
    seed: int = 0

    def validate(self) -> None:
        if self.messages < 1 or self.handshakes < 0:
            raise ValueError(f"--messages must be at least 1 and --handshakes at least 0 (got {self.messages}, "
                             f"{self.handshakes})")


class _Soak:
    def __init__(self, socket_path: Path, rng: random.Random):
        self.socket, self.rng = socket_path, rng
        self.client: PyClient | None = None
        self.addresses = [0]
        self.outcomes = collections.Counter()        # (mutation, "reply" | "error") -> count
        self.unanswered: list[str] = []
        self.bad_accepted: list[str] = []
        self.malformed = 0

    def connect(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client = PyClient(self.socket, program="tally-bench-fuzz")
        self.addresses = [0]

    def send(self) -> None:
        record = mutated(self.rng, self.addresses)
        tag = self.client.next_tag()
        self.client.segment.request_ring.push(record.kind, tag, record.payload)
        while True:
            got = self.client.segment.completion_ring.pop(ANSWER_TIMEOUT_S)
            if got is None:
                self.unanswered.append(f"{record.mutation} {record.name or record.kind} {record.fields}")
                self.connect()       # a session that stopped answering: go on with a fresh one
                return
            kind, got_tag, payload = got
            if got_tag == 0:         # unsolicited: run "host functions" at once; printf output is dropped
                if kind == HOST_FUNC_READY:
                    ready, _ = protocol.codec("HostFuncReady").unpack(payload)
                    self.client.send("HostFuncDone", callback=ready["callback"])
                continue
            if got_tag != tag:
                raise ConnectionError(f"answer tagged {got_tag} while waiting for {tag}")
            break
        answer = "error" if kind == ERROR else "reply"
        self.outcomes[(record.mutation, answer)] += 1
        self.malformed += record.malformed
        if record.malformed and answer != "error":
            self.bad_accepted.append(f"{record.mutation} kind {record.kind} -> {protocol.BY_KIND[kind].message.name}")
        if answer == "reply":
            values, _ = protocol.BY_KIND[kind].unpack(payload)
            if values.get("dptr"):                  # an allocation or reservation to aim at
                self.addresses = [*self.addresses[-MAX_ADDRESSES + 1:], values["dptr"]]


def run_fuzz(config: FuzzConfig, progress=None) -> dict:
    config.validate()
    rng = random.Random(config.seed)
    workdir = Path(tempfile.mkdtemp(prefix="fuzz-", dir=paths.made_runtime_dir()))
    try:
        with ProcessGroup(workdir) as group:
            socket_path = workdir / "server.sock"
            server = group.start(f"tally-server --backend {config.backend}",
                                 [*commands.tool("tally-server"), "--backend", config.backend,
                                  "--socket", str(socket_path)], "server.log")
            wait_for(socket_path.exists, 60.0, server, "listening on its socket")
            soak = _Soak(socket_path, rng)
            soak.connect()
            started = time.monotonic()
            for i in range(config.messages):
                if i and i % RECONNECT_EVERY == 0:
                    soak.connect()
                    if progress:
                        progress(i, time.monotonic() - started)
                soak.send()
            ring_s = time.monotonic() - started
            soak.client.close()
            handshakes = collections.Counter()
            off_handshakes = []
            started = time.monotonic()
            for _ in range(config.handshakes):
                mutation = rng.choice(fuzz_handshakes.MUTATIONS)
                outcome = fuzz_handshakes.attempt(socket_path, mutation, rng)
                handshakes[(mutation, outcome)] += 1
                expected = fuzz_handshakes.EXPECTED[mutation]
                if outcome not in (fuzz_handshakes.REFUSED, fuzz_handshakes.HUNG_UP, fuzz_handshakes.ACCEPTED) \
                        or (expected is not None and outcome != expected):
                    off_handshakes.append(f"{mutation}: {outcome}")
            handshake_s = time.monotonic() - started
            served = _good_client(socket_path)
            idle = _wait_idle(socket_path, server)
            alive = server.running()
            log = server.log_path.read_text(errors="replace")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    crashes = [line for line in log.splitlines() if "crashed" in line]
    report = {
        "config": asdict(config),
        "messages": {"count": config.messages, "seconds": round(ring_s, 2),
                     "per_second": round(config.messages / ring_s, 1),
                     "by_mutation": {m: {a: soak.outcomes[(m, a)] for a in ("reply", "error")} for m in MUTATIONS},
                     "unanswered": soak.unanswered[:20], "unanswered_count": len(soak.unanswered),
                     "malformed": soak.malformed,
                     "bad_accepted": soak.bad_accepted[:20], "bad_accepted_count": len(soak.bad_accepted)},
        "handshakes": {"count": config.handshakes, "seconds": round(handshake_s, 2),
                       "per_second": round(config.handshakes / handshake_s, 1) if handshake_s else None,
                       "outcomes": {f"{m}: {o}": n for (m, o), n in sorted(handshakes.items())},
                       "unexpected": off_handshakes[:20], "unexpected_count": len(off_handshakes)},
        "good_client_served": served, "idle_at_end": idle, "server_running": alive,
        "crash_lines": crashes[:20], "crash_count": len(crashes), "crash_reports": _crash_reports(log),
    }
    report["checks"] = _checks(report)
    return report


def _crash_reports(log: str, most: int = 3) -> list[str]:
    """The first few handler crashes with their tracebacks, as the server logged them."""
    reports, current = [], None
    for line in log.splitlines():
        if current is not None:
            if line.startswith("tally-server "):
                reports.append("\n".join(current))
                current = None
            else:
                current.append(line)
                continue
        if len(reports) >= most:
            break
        if "crashed" in line:
            current = [line]
    if current is not None and len(reports) < most:
        reports.append("\n".join(current))
    return reports


def _good_client(socket_path: Path) -> bool:
    client = PyClient(socket_path, program="tally-bench-fuzz-good")
    try:
        kind, values, _ = client.call("MemAlloc", bytes=4096)
        ping = client.call("Ping", value=77)
        return kind == "MemAllocReply" and ping[0] == "Pong" and ping[1]["value"] == 77
    finally:
        client.close()


def _wait_idle(socket_path: Path, server, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.running():
        status = query_status(socket_path, timeout=30.0)
        s = status["server"]
        if not status["clients"] and not s["clients_leaving"] and s["memory_free"] == s["memory_total"]:
            return True
        time.sleep(0.1)
    return False


def _checks(r: dict) -> list[dict]:
    m, h = r["messages"], r["handshakes"]
    return [
        {"name": "no crash", "passed": r["server_running"] and r["crash_count"] == 0,
         "detail": f"server {'running' if r['server_running'] else 'GONE'}, {r['crash_count']} crash line(s) in its log"},
        {"name": "every message answered", "passed": m["unanswered_count"] == 0,
         "detail": f"{m['count'] - m['unanswered_count']} of {m['count']} answered"},
        {"name": "every malformed message answered with an error", "passed": m["bad_accepted_count"] == 0,
         "detail": f"{m['malformed']} malformed (cut short, unknown kind, bytes after a message without a tail), "
                   f"{m['bad_accepted_count']} not answered with an error"},
        {"name": "every bad handshake refused or hung up on", "passed": h["unexpected_count"] == 0,
         "detail": f"{h['count']} handshakes, {h['unexpected_count']} not as expected"},
        {"name": "still serving a good client", "passed": r["good_client_served"] and r["idle_at_end"],
         "detail": f"served: {r['good_client_served']}; all memory free at the end: {r['idle_at_end']}"},
    ]


def format_fuzz(r: dict) -> str:
    m, h = r["messages"], r["handshakes"]
    lines = [f"{m['count']} ring messages in {m['seconds']:.1f} s ({m['per_second']:.0f}/s); "
             f"{h['count']} handshakes in {h['seconds']:.1f} s",
             f"{'mutation':>14} {'reply':>9} {'error':>9}"]
    for name, counts in m["by_mutation"].items():
        lines.append(f"{name:>14} {counts['reply']:>9} {counts['error']:>9}")
    lines.append("handshakes: " + ", ".join(f"{k} {n}" for k, n in h["outcomes"].items()))
    lines.append("")
    for c in r["checks"]:
        lines.append(f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {c['detail']}")
    return "\n".join(lines)
