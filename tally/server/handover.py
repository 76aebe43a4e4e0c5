"""Exactly one server serves a migrating job, even when the message saying
which one is lost (tally-server migrate: tally/server/migration.py is the
source's side, migration_import.py the target's).

The job's segment holds an owner word (csrc/include/tally/segment.h,
SegmentState.owner) that only ever changes by compare-and-swap, so the source
and the target of a migration can never both win it, and whichever of them
misses the other's message reads the outcome from the segment itself:

    SERVING(S, e)  --S offers the job-->          HANDING(S, e+1)   nobody serves
    HANDING(S, e+1) --T claims it-->              CLAIMED(T, e+1)   T will serve
    HANDING(S, e+1) --S keeps it-->               SERVING(S, e+1)   T's answer was lost or a
                                                                    refusal; T can no longer claim
    CLAIMED(T, e+1) --T, at the job's next request--> SERVING(T, e+1)
    CLAIMED(T, e+1), T dead --S takes it back-->  SERVING(S, e+1)

Why that is enough: the target claims only once nothing can fail any more
(its copy of the state is complete and its session made), so a claim means it
serves unless it dies; it handles nothing of the job before it marks SERVING,
so a claimed target that died changed nothing, and the source, which frees
nothing before the outcome is known, still holds the job's exact state and
takes it back. Once the word says SERVING(T), the job's state lives on T only:
if T dies after that, the job fails as it would with any server dying.

The word: the server's pid in bits 0-31, the state in 32-39, the epoch in 40-63
(one per migration attempt, so a claim left over from an older attempt can
never match). 0 (never migrated) means the segment's creator serves. Pids are
compared, so the servers of a node must see each other's (one pid namespace,
as `tally-server migrate` on one node already needs for its socket paths).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from tally import _core
from tally.server.job import ServedJob
from tally.server.lifecycle import JobState
from tally.server.segments import process_gone

SERVING, HANDING, CLAIMED = 1, 2, 3
STATE_NAMES = {SERVING: "serving", HANDING: "handing over", CLAIMED: "claimed"}
EPOCH_MASK = (1 << 24) - 1


class NotOwner(Exception):
    """This server does not serve the segment (it cannot offer the job)."""


@dataclass(frozen=True)
class Owner:
    state: int
    pid: int
    epoch: int

    @property
    def word(self) -> int:
        return (self.epoch & EPOCH_MASK) << 40 | self.state << 32 | self.pid

    @classmethod
    def of(cls, word: int, creator_pid: int) -> Owner:
        if word == 0:
            return cls(SERVING, creator_pid, 0)
        return cls((word >> 32) & 0xFF, word & 0xFFFFFFFF, word >> 40)

    def __str__(self) -> str:
        return f"{STATE_NAMES.get(self.state, f'state {self.state}')} by pid {self.pid} (attempt {self.epoch})"


def owner(segment) -> Owner:
    return Owner.of(segment.owner, segment.creator_pid)


def describe(segment) -> str:
    """What status shows: "serving", "handing over" (a migration out is under way) or
    "claimed" (migrated here, not serving until the job's next request)."""
    try:
        return STATE_NAMES.get(owner(segment).state, "unknown")
    except _core.TransportError:        # closed in this process: the job left
        return "closed"


# ---- the source ----------------------------------------------------------------------

def offer(segment) -> Owner:
    """Before the commit goes out: the job is nobody's until the target claims it or
    `settle` keeps it. Returns the word the target must claim (sent in the commit)."""
    me = os.getpid()
    word = segment.owner
    current = Owner.of(word, segment.creator_pid)
    # A job that migrated here and has not sent a request since is still CLAIMED: ours too.
    if current.state not in (SERVING, CLAIMED) or current.pid != me:
        raise NotOwner(f"this server (pid {me}) does not serve the job's segment: it is {current}")
    handing = Owner(HANDING, me, (current.epoch + 1) & EPOCH_MASK)
    if segment.owner_exchange(word, handing.word) != word:
        raise NotOwner(f"the job's segment changed owner meanwhile: it is {owner(segment)}")
    return handing


@dataclass(frozen=True)
class Settled:
    here: bool                 # the source serves the job again; False: the target does
    why: str


def settle(segment, handing: Owner) -> Settled:
    """When the target's answer to the commit is not a yes (lost, broken off, timed out,
    or a refusal): who serves the job now, decided by the segment."""
    kept = Owner(SERVING, handing.pid, handing.epoch)
    seen = segment.owner_exchange(handing.word, kept.word)
    while seen != handing.word:
        now = Owner.of(seen, segment.creator_pid)
        if now.state != CLAIMED or now.epoch != handing.epoch:
            return Settled(False, f"the target took the job (its segment says {now})")
        if not process_gone(now.pid):
            return Settled(False, f"the target (pid {now.pid}) claimed the job and serves it from its next request")
        # Claimed by a target that died before it handled anything: our copy is the job's state.
        if segment.owner_exchange(seen, kept.word) == seen:
            return Settled(True, f"the target (pid {now.pid}) claimed the job and died before it served it")
        seen = segment.owner                  # it changed meanwhile; look again
    return Settled(True, "the target had not claimed the job, and now cannot")


# ---- the target ----------------------------------------------------------------------

def claim(segment, handing_word: int) -> bool:
    """Once nothing of the import can fail any more: True if this server now owns the
    job (CLAIMED); False if the source kept it (the import must be undone)."""
    handing = Owner.of(handing_word, segment.creator_pid)
    if handing.state != HANDING:
        return False
    claimed = Owner(CLAIMED, os.getpid(), handing.epoch)
    return segment.owner_exchange(handing_word, claimed.word) == handing_word


def start_serving(segment) -> bool:
    """CLAIMED(us) -> SERVING(us) before the first request is handled; True if we serve."""
    me = os.getpid()
    word = segment.owner
    now = Owner.of(word, segment.creator_pid)
    if now.pid == me and now.state == SERVING:
        return True
    if now.pid != me or now.state != CLAIMED:
        return False
    return segment.owner_exchange(word, Owner(SERVING, me, now.epoch).word) == word


def serve_from_first_request(session: ServedJob, poll_s: float) -> bool:
    """On a migrated job's session thread, before its loop: wait for the job's first
    request here (one the source took off the ring counts), then mark SERVING. Under
    the session's hold, so a migration onward that holds the job first decides.
    False: the segment is not ours to serve (the caller must not touch it)."""
    ring = session.segment.request_ring
    closing = session.closing_event
    while not closing.is_set() and not session.pending_records and session.life.state is not JobState.EVICTED:
        try:
            if ring.wait_record(poll_s):
                break
        except _core.PeerDead:
            return True              # the job is gone: the loop notices and closes the session
    if not session.hold.enter(closing, poll_s):
        return True                  # closing (a migration onward took it, or the job left)
    try:
        return start_serving(session.segment)
    finally:
        session.hold.leave()
