"""Every process of one co-location run (a tally-server and its jobs), and the
guarantee that none outlives the run, whatever happens.

Each process gets its own session (so a terminal's Ctrl-C reaches only the
benchmark, which then stops them in order) and a parent-death signal (so they
go even when the benchmark itself is SIGKILLed). Output goes to one log file
per process; a failure names the process and quotes the end of its log.
"""
from __future__ import annotations

import ctypes
import signal
import subprocess
import threading
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1
OUTPUT_TAIL_CHARS = 4000


class JobFailed(RuntimeError):
    """A process of the benchmark failed; the message names it and quotes its output."""


# Looked up once here, so that the child, between fork and exec, only makes the call.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    # Runs in the child between fork and exec (the benchmark starts no threads of
    # its own, so nothing is held across the fork). SIGTERM, not SIGKILL: a
    # tally-server given SIGTERM still removes its socket and shared memory.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    # A benchmark started in the background of a script has SIGINT and SIGQUIT
    # ignored, and an ignored signal stays ignored across exec: tally-bench chaos's
    # SIGINT strikes then did nothing, and each job was killed 60 s later. Its
    # processes get the default action back.
    for signum in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)


class Managed:
    def __init__(self, label: str, argv: list[str], log_path: Path, env: dict | None):
        self.label = label
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True, preexec_fn=_die_with_parent)  # noqa: PLW1509

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self, limit: int = OUTPUT_TAIL_CHARS) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no output file)"
        if len(text) > limit:
            text = "[...]\n" + text[-limit:]
        return text.strip() or "(no output)"

    def failure(self, what: str) -> JobFailed:
        return JobFailed(f"{self.label} {what}.\n  command: {' '.join(self.argv)}\n  its output "
                         f"({self.log_path}):\n" + "\n".join("    " + line for line in self.output().splitlines()))

    def wait(self, timeout: float) -> int:
        """Exit status; raises JobFailed (after killing it) if it runs past `timeout` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop(grace=5.0)
            raise self.failure(f"did not finish within {timeout:.0f} s and was killed") from None

    def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; reaps the process."""
        if self.proc.poll() is not None:
            return
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        except ProcessLookupError:
            self.proc.wait()


class ProcessGroup:
    """Start processes; on exit (normal, exception or Ctrl-C) stop them all,
    jobs first (newest first), the server last, so it can release what they held."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.processes: list[Managed] = []

    def start(self, label: str, argv: list[str], log_name: str, env: dict | None = None) -> Managed:
        managed = Managed(label, argv, self.directory / log_name, env)
        self.processes.append(managed)
        return managed

    def stop_all(self, grace: float = 10.0) -> None:
        for managed in reversed(self.processes):
            managed.stop(grace)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc) -> None:
        # A second Ctrl-C while stopping must not leave processes behind.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            self.stop_all()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def wait_for(condition, timeout: float, subject: Managed, what: str, also: tuple[Managed, ...] = (),
             poll: float = 0.02) -> None:
    """Poll `condition()` until true. JobFailed if `subject` (or a process in
    `also`, e.g. the server) exits first, or if `subject` does not get there in time."""
    deadline = time.monotonic() + timeout
    while not condition():
        for managed in (subject, *also):
            if not managed.running() and not condition():
                raise managed.failure(f"exited with status {managed.proc.returncode} before {what}")
        if time.monotonic() > deadline:
            raise subject.failure(f"did not get to {what} within {timeout:.0f} s")
        time.sleep(poll)
