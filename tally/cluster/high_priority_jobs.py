"""One high-priority job per server, unless the operator allows more
(`tally-server --max-hp-jobs N`).

The scheduler protects "the" high-priority job: two jobs that both call
themselves latency-critical compete at the same priority, and neither gets
its isolated latency. So a further high-priority job is refused at handshake
(HandshakeStatus.QUOTA_UNAVAILABLE, with `refusal`'s sentence, which the job
prints), and `tally-run` refuses it itself before starting the job, from the
server's status, with the same sentence.

An AdmitClient plugin of tally.scheduler.hooks. `attached` lists the
high-priority jobs attached now; the server calls admit with its admission
lock held, so two jobs handshaking at once cannot both take the last place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tally.scheduler.hooks import ALLOW, AdmissionRequest, Status, deny

# HelloReply.message holds 191 bytes; the longest sentence below fits with room.
PROGRAM_CHARS = 16


@dataclass(frozen=True)
class AttachedJob:
    client_id: int
    pid: int
    program: str


def refusal(attached: list[AttachedJob], max_jobs: int) -> str:
    """Why one more high-priority job cannot attach, and what to do instead."""
    first = attached[0]
    program = first.program if len(first.program) <= PROGRAM_CHARS else first.program[:PROGRAM_CHARS - 3] + "..."
    others = f" and {len(attached) - 1} more" if len(attached) > 1 else ""
    allowed = "one high-priority job" if max_jobs == 1 else f"{max_jobs} high-priority jobs"
    return (f"this server allows {allowed} and runs client {first.client_id} (pid {first.pid}, {program}){others}; "
            f"run this job as --priority best-effort or raise tally-server --max-hp-jobs")


class HighPriorityJobs:
    def __init__(self, max_jobs: int, attached: Callable[[], list[AttachedJob]]):
        if max_jobs < 1:
            raise ValueError(f"--max-hp-jobs must be at least 1, not {max_jobs}")
        self.max_jobs = max_jobs
        self._attached = attached

    def admit(self, request: AdmissionRequest) -> Status:
        if not request.high_priority:
            return ALLOW
        attached = self._attached()
        if len(attached) >= self.max_jobs:
            return deny(refusal(attached, self.max_jobs))
        return ALLOW
