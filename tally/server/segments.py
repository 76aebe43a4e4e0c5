"""Names of the shared-memory objects tally creates, and reclaiming stale ones.

A job's segment is /tally-<server pid>-<client id>; a job's pinned or managed
memory is /tally-pin-<job pid>-<n>. The job removes its segment's name as soon
as it has mapped it, and the server removes a pinned object's name once it has
opened it, so a name outlives its creator only if the creator died inside that
window (a server SIGKILLed mid-handshake, a job killed mid-registration). A
server that starts removes every such name whose creating process is gone;
those of live processes (another server, a running job) are left alone.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger("tally.server")

SHM_DIR = Path("/dev/shm")
STALE_NAME = re.compile(r"^tally-(?:pin-)?(\d+)-\d+$")


def segment_prefix(pid: int | None = None) -> str:
    """POSIX name prefix of the segments this server creates."""
    return f"/tally-{os.getpid() if pid is None else pid}-"


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True     # someone else's process: alive, and not ours to judge
    return True


def process_gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie waiting for its parent has too)."""
    if not process_alive(pid):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].startswith(("Z", "X"))


def reclaim_job_objects(pid: int, shm_dir: Path = SHM_DIR) -> list[str]:
    """Once a job that died has been let go: remove the names of the pinned or managed
    memory objects it created and was killed before the server opened (the window
    the module docstring names; `tally-bench chaos` hit it 1 round in 100). Left
    alone while the process still runs."""
    if not process_gone(pid):
        return []
    prefix = f"tally-pin-{pid}-"
    removed = []
    try:
        names = sorted(n for n in os.listdir(shm_dir) if n.startswith(prefix))
    except OSError:
        return removed
    for name in names:
        try:
            (shm_dir / name).unlink()
            removed.append(name)
        except OSError:
            pass                      # gone already
    if removed:
        log.info("removed %d shared-memory object(s) of pid %d, which died before they were registered: %s",
                 len(removed), pid, ", ".join(removed))
    return removed


def reclaim_stale(shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink tally objects whose creating process no longer runs; their names."""
    reclaimed = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return reclaimed
    for name in names:
        m = STALE_NAME.match(name)
        if m is None or process_alive(int(m.group(1))):
            continue
        try:
            (shm_dir / name).unlink()
            reclaimed.append(name)
        except FileNotFoundError:
            pass                      # another starting server took it first
        except OSError as e:
            log.warning("cannot remove stale shared memory %s: %s", shm_dir / name, e)
    if reclaimed:
        log.info("removed %d shared-memory object(s) left by tally processes that no longer run: %s",
                 len(reclaimed), ", ".join(sorted(reclaimed)))
    return reclaimed
