"""How tally-run runs the job: as its child process, which it watches.

tally-run stays the job's parent (rather than exec-ing it) so that it can say
what happened to the job when it ends:

- Eviction. tally-run names a notice file in the job's environment
  (TALLY_EVICTION_NOTICE); when tally-server evicts the job (tally-server evict,
  SysProbe, the server's shutdown), tally's client library in the job appends the
  reason to it, and a line starting "work dropped:" when the job lost work: the
  eviction dropped work it had asked for (queued, running, or not yet handled),
  or the job asked for more (a launch, a copy, an allocation, a synchronization)
  after it. Then tally-run prints `tally-run: evicted by tally-server: <reason>`
  and exits 75 (EX_TEMPFAIL, sysexits.h), whatever the job's own status: the job
  did not finish its work even if it ignored the errors, and 75 tells an
  orchestrator to run it again. A job evicted after its work was done, which
  then only exited (freeing, unloading and destroying fail harmlessly) and
  exited 0, lost nothing: tally-run says so and exits 0, so a finished job is
  not run again (a server's shutdown that found the job idle, say). Had it
  exited otherwise, a release it checked may have failed for the eviction:
  tally-run reports the eviction (75).
- Signals. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to tally-run
  go to the job. One the terminal sends (Ctrl-C, Ctrl-\\) reaches the whole
  foreground process group, the job included, so tally-run does not send it a
  second time; siginfo's si_code tells the two apart (SI_KERNEL for the terminal's).
- A job whose tally-run is killed (SIGKILL, which cannot be forwarded) is killed
  too (PR_SET_PDEATHSIG), so no job runs on unwatched.
- Otherwise tally-run exits as the job did: its exit status, or, when a signal
  killed it, the same signal (without a core file of its own), so the shell or
  the orchestrator sees what it would have seen without tally-run.
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

EX_TEMPFAIL = 75
NOTICE_ENV = "TALLY_EVICTION_NOTICE"
WORK_DROPPED = "work dropped: "     # a notice line's start (client_preload/src/connection/eviction.cpp)
FORWARDED = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                       signal.SIGUSR2})
SI_KERNEL = 0x80          # siginfo si_code of a signal the kernel sent (the terminal's)
PR_SET_PDEATHSIG = 1
POLL_S = 0.5              # the job's exit is noticed by SIGCHLD; this bounds a missed one

_libc = ctypes.CDLL(None, use_errno=True)


class CannotRun(Exception):
    """The job's program could not be started (the message says why)."""


def run(command: list[str], env: dict) -> int:
    """Run the job to its end; tally-run's exit status (see the module docstring)."""
    notice = _notice_file()
    if notice is not None:
        env = {**env, NOTICE_ENV: str(notice)}
    watched = FORWARDED | {signal.SIGCHLD}
    job_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    me = os.getpid()
    try:
        try:
            job = subprocess.Popen(command, env=env, preexec_fn=lambda: _in_child(me, job_mask))
        except OSError as e:
            raise CannotRun(f"cannot run {command[0]!r}: {e.strerror}") from None
        _wait(job, watched)
        reason, dropped = _eviction_notice(notice) if notice is not None else (None, None)
    finally:
        if notice is not None:
            notice.unlink(missing_ok=True)
        signal.pthread_sigmask(signal.SIG_SETMASK, job_mask)
    if reason is not None and (dropped is not None or job.returncode != 0):
        print(f"tally-run: evicted by tally-server: {reason}", file=sys.stderr, flush=True)
        return EX_TEMPFAIL
    if reason is not None:
        print(f"tally-run: evicted by tally-server after its work was done ({reason}); the job exited 0",
              file=sys.stderr, flush=True)
    if job.returncode < 0:
        return _die_like(-job.returncode)
    return job.returncode


def _notice_file() -> Path | None:
    """An empty file for the job's client library to write an eviction's reason to;
    None when no temporary file can be made (an eviction then shows only in the
    job's own stderr), which tally-run says."""
    try:
        fd, name = tempfile.mkstemp(prefix="tally-run-", suffix=".evicted")
    except OSError as e:
        print(f"tally-run: cannot create a temporary file ({e}); if tally-server evicts the job, only the "
              f"job's stderr will say so, and tally-run exits as the job does", file=sys.stderr)
        return None
    os.close(fd)
    return Path(name)


def _in_child(parent: int, mask) -> None:
    """In the forked child, before exec: the job gets the signal mask tally-run had,
    and dies with tally-run."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:      # tally-run died before prctl took effect
        os._exit(1)


def _wait(job: subprocess.Popen, watched: frozenset) -> None:
    while job.poll() is None:
        info = signal.sigtimedwait(watched, POLL_S)
        if info is None or info.si_signo == signal.SIGCHLD or info.si_code == SI_KERNEL:
            continue
        try:
            job.send_signal(info.si_signo)
        except ProcessLookupError:
            pass                       # it has just exited


def _eviction_notice(notice: Path) -> tuple[str | None, str | None]:
    """(the eviction's reason, why the job lost work); None for what the notice
    does not say."""
    try:
        lines = [line.strip() for line in notice.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None, None
    dropped = [line[len(WORK_DROPPED):] for line in lines if line.startswith(WORK_DROPPED)]
    reasons = [line for line in lines if not line.startswith(WORK_DROPPED)]
    return (reasons[0] if reasons else None), (dropped[0] if dropped else None)


def _die_like(signum: int) -> int:
    """End tally-run by the signal that ended the job; 128 + signum if it survives
    that (a signal whose default action is not to terminate)."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # the job's core file is the one that matters
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
    return 128 + signum
