"""tally-run as the job's parent (tally/cli/job_process.py): signals sent to it reach
the job, one the terminal sends is not delivered twice, its exit status is the
job's (a signal's death included), a job outlives no SIGKILLed tally-run, and an
eviction notice makes it exit 75 with one line. The jobs are small shell and
Python programs against a null-backend server (the real eviction, end to end,
is in test_e2e_eviction.py)."""
from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest
from server_harness import ServerProcess


@pytest.fixture(scope="module")
def null_server(tmp_path_factory):
    server = ServerProcess(tmp_path_factory.mktemp("run") / "s.sock", backend="null")
    yield server
    server.stop()


def tally_run(server, *command: str) -> list[str]:
    return [sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket_path), "--", *command]


def run(server, *command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(tally_run(server, *command), capture_output=True, text=True, timeout=60, **kwargs)


# A job that reports each SIGTERM/SIGINT/SIGHUP it gets and exits 3 after the first SIGTERM.
SIGNAL_REPORTER = r"""
import signal, sys, time
def got(n, _f):
    print("got", signal.Signals(n).name, flush=True)
    if n == signal.SIGTERM:
        sys.exit(3)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, got)
print("ready", flush=True)
time.sleep(60)
"""


def test_the_jobs_exit_status_is_tally_runs(null_server):
    assert run(null_server, "sh", "-c", "exit 7").returncode == 7
    assert run(null_server, "true").returncode == 0
    missing = run(null_server, "/nonexistent/program")
    assert missing.returncode == 127 and "cannot run '/nonexistent/program'" in missing.stderr


def test_a_job_killed_by_a_signal_ends_tally_run_by_the_same_signal(null_server):
    assert run(null_server, "sh", "-c", "kill -KILL $$").returncode == -signal.SIGKILL
    assert run(null_server, "sh", "-c", "kill -TERM $$").returncode == -signal.SIGTERM


def test_signals_sent_to_tally_run_reach_the_job(null_server):
    job = subprocess.Popen(tally_run(null_server, sys.executable, "-c", SIGNAL_REPORTER), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "ready"
    for sig in (signal.SIGHUP, signal.SIGINT):
        job.send_signal(sig)
        assert job.stdout.readline().strip() == f"got {sig.name}"
    job.send_signal(signal.SIGTERM)
    out, _err = job.communicate(timeout=30)
    assert out.strip() == "got SIGTERM" and job.returncode == 3


def test_a_sigkilled_tally_run_takes_its_job_with_it(null_server, tmp_path):
    pid_file = tmp_path / "job.pid"
    job = subprocess.Popen(tally_run(null_server, "sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"))
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    job_pid = int(pid_file.read_text())
    job.kill()
    assert job.wait(30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while _alive(job_pid):
        assert time.monotonic() < deadline, f"the job (pid {job_pid}) outlived its tally-run"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_ctrl_c_at_a_terminal_reaches_the_job_once(null_server):
    # The terminal sends SIGINT to the whole foreground process group: the job has it
    # already, and tally-run must not send it a second one.
    counter = ("import signal, time\n"
               "n = 0\n"
               "def got(*_):\n"
               "    global n\n"
               "    n += 1\n"
               "signal.signal(signal.SIGINT, got)\n"
               "print('ready', flush=True)\n"
               "while n == 0: time.sleep(0.01)\n"
               "time.sleep(1.0)\n"
               "print('sigints', n, flush=True)\n")
    pid, fd = pty.fork()
    if pid == 0:                                       # the child: a session whose terminal is the pty
        try:
            os.execv(sys.executable, tally_run(null_server, sys.executable, "-c", counter))
        finally:
            os._exit(127)
    output = _read_until(fd, b"ready")
    os.write(fd, b"\x03")                              # Ctrl-C
    output += _read_until(fd, b"sigints")
    output += _read_until(fd, b"\n")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert b"sigints 1" in output, output
    assert os.waitstatus_to_exitcode(status) == 0


def _read_until(fd: int, marker: bytes, timeout: float = 30) -> bytes:
    got = b""
    deadline = time.monotonic() + timeout
    while marker not in got:
        assert time.monotonic() < deadline, f"no {marker!r} from the job; it wrote {got!r}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                got += os.read(fd, 4096)
            except OSError:
                break
    return got


def test_an_eviction_notice_makes_tally_run_exit_75_with_the_reason(null_server):
    # What tally's client library writes when the server evicts the job, written here by the job itself.
    r = run(null_server, "sh", "-c", 'echo "over its memory limit" >> "$TALLY_EVICTION_NOTICE"; exit 1')
    assert r.returncode == 75
    assert r.stderr.splitlines() == ["tally-run: evicted by tally-server: over its memory limit"]
    notice = run(null_server, "sh", "-c", 'echo "$TALLY_EVICTION_NOTICE"').stdout.strip()
    assert notice and not os.path.exists(notice)       # removed once the job ended
