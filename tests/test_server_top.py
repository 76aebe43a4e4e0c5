"""tally-server top driven in a pseudo-terminal, as a person runs it: a job started
with tally-run appears in the view and leaves it, the view says when the server
goes away, and q quits."""
from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import pytest
from e2e_helpers import build_cuda, finish, start_job
from server_harness import ServerProcess

from tally.cli.server_main import query_status
from tally.cli.top_view import _quantile_bound, render

ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>78])")


class Terminal:
    """A process on the slave side of a pty of `rows` x `cols`; the test reads the
    master side (escape sequences stripped) and types into it."""

    def __init__(self, argv: list[str], rows: int = 50, cols: int = 250):
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                                     start_new_session=True)
        os.close(slave)
        self.master = master
        self.raw = b""
        self.seen = 0          # where the next expect() starts looking

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace"))

    def read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if ready:
            try:
                self.raw += os.read(self.master, 65536)
            except OSError:          # EIO: the process closed the terminal
                pass

    def expect(self, pattern: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.text[self.seen:])
            if found:
                self.seen += found.end()
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} did not appear; the screen showed:\n{self.text[-3000:]}")
            self.read(0.2)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait(self, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.read(0.1)
        return self.proc.wait(timeout=1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def emulator():
    process = ServerProcess(Path(tempfile.mkdtemp(prefix="tally-top-")) / "server.sock", backend="emulator")
    yield process
    process.stop()


def top_command(socket_path) -> list[str]:
    return [sys.executable, "-m", "tally.cli.server_main", "top", "--socket", str(socket_path),
            "--interval", "0.2"]


def test_a_job_appears_and_leaves_then_the_server_goes_away_and_q_quits(nvcc, emulator):
    program = build_cuda(nvcc, "pod_job.cu")
    term = Terminal(top_command(emulator.socket_path))
    try:
        term.expect(r"jobs: 0 attached")
        job = start_job(emulator.socket_path, program, priority="high")
        try:
            assert job.stdout.readline().startswith("total=")
            assert job.stdout.readline().strip() == "ready"
            term.expect(r"jobs: 1 attached")
            status = query_status(emulator.socket_path)
            (client,) = status["clients"]
            sms = status["server"]["sm_count"]
            # its row: id, pid, priority, the whole device, 48 KiB of device memory, no quota, one kernel,
            # one error (its allocation past the device's memory), its program
            term.expect(rf"{client['client_id']}\s+{client['pid']}\s+high\s+running\s+whole \({sms} SMs\)\s+"
                        rf"48\.00 KiB\s+-\s+1\s+1\s+\S*pod_job")
        finally:
            job.stdin.write("done\n")
            job.stdin.flush()
            assert finish(job).returncode == 0
        term.expect(r"jobs: 0 attached")
        emulator.stop()
        term.expect(r"no tally-server answers on \S+server\.sock since \d\d:\d\d:\d\d")
        term.expect(r"last known state")
        term.type("q")
        assert term.wait() == 0
    finally:
        term.close()


def test_without_a_server_it_says_so_and_q_still_quits(tmp_path):
    term = Terminal(top_command(tmp_path / "none.sock"))
    try:
        term.expect(r"no tally-server answers on \S+none\.sock")
        term.type("q")
        assert term.wait() == 0
    finally:
        term.close()


@pytest.mark.parametrize("interval", ["0", "-1", "soon"])
def test_a_bad_interval_is_refused(interval):
    r = subprocess.run([*top_command("/nonexistent.sock")[:-1], interval], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"{interval!r} is not a refresh interval in seconds" in r.stderr


def test_health_and_transitions_are_shown_when_the_record_has_them():
    from rich.console import Console

    status = {"server": {"pid": 1, "backend": "emulator", "policy": "priority", "uptime_s": 9.0, "device": 0,
                         "device_name": "emu", "memory_total": 1 << 30, "memory_free": 1 << 29,
                         "scheduler": {"hp_queueing_delay_s": {"buckets": [[1e-4, 98], [1e-3, 100], ["+Inf", 100]],
                                                               "count": 100, "sum": 0.01}},
                         "health": {"state": "overlimit", "reason": "memory over its limit for 5 s",
                                    "transitions": [{"t": 1.0, "from": "init", "to": "healthy",
                                                     "reason": "first reading"},
                                                    {"t": 7.5, "from": "healthy", "to": "overlimit",
                                                     "reason": "memory over its limit for 5 s"}]}},
              "clients": [{"client_id": 3, "pid": 99, "priority": "best-effort", "program": "./train",
                           "memory_used": 1 << 20, "memory_quota": None, "memory_quota_bytes": 1 << 29,
                           "sm_percent": 25.0, "sm_granted": 2, "state": "paused", "errors": 0}]}
    console = Console(width=200, record=True)
    console.print(render(status, "/s.sock"))
    text = console.export_text()
    assert "health overlimit  memory over its limit for 5 s" in text
    assert "99% of 100 kernels <= 1.0 ms" in text
    assert "jobs: 1 attached" in text
    row = next(line.split() for line in text.splitlines() if "./train" in line)
    assert row == ["3", "99", "best-effort", "paused", "25%", "(2", "SMs)", "1.00", "MiB", "512.00", "MiB", "-",
                   "0", "./train"]
    lines = [line.strip() for line in text.splitlines()]
    newest = lines.index("t=7.5  healthy -> overlimit  memory over its limit for 5 s")
    assert lines[newest + 1] == "t=1.0  init -> healthy  first reading"       # newest first


def test_quantile_bound_picks_the_first_bucket_holding_enough():
    delay = {"buckets": [[1e-5, 50], [1e-4, 90], [1e-3, 99], ["+Inf", 100]], "count": 100}
    assert _quantile_bound(delay, 0.5) == "10 us"
    assert _quantile_bound(delay, 0.9) == "100 us"
    assert _quantile_bound(delay, 0.99) == "1.0 ms"
    assert _quantile_bound(delay, 1.0) == "+Inf"
