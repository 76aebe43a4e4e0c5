"""The owner word of a job's segment (tally/server/handover.py) on real shared
memory, with the target a forked process: the source keeps a job nobody
claimed (and a late claim then fails), hands over a job a live target claimed,
takes back one whose claimer died before serving it, and leaves one the target
served; a source that does not own the segment cannot offer it; and when the
target's claim races the source's settling, exactly one of them wins, every
time. (End to end, with servers and a job: tests/test_e2e_migrate_handover.py.)"""
from __future__ import annotations

import itertools
import os

import pytest

from tally import _core
from tally.server import handover

_names = itertools.count()


@pytest.fixture
def segment():
    seg = _core.Segment.create(f"/tally-test-{os.getpid()}-{next(_names)}", request_bytes=4096,
                               completion_bytes=4096, upload_bytes=4096, download_bytes=4096)
    seg.unlink()
    yield seg
    seg.close()


def in_child(fn) -> int:
    """Run fn() in a forked process that exits at once; its pid, reaped (so it is gone)."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return pid


class LiveChild:
    """A forked process that runs fn() and stays alive until closed."""

    def __init__(self, fn):
        done_r, done_w = os.pipe()
        self._stop_r, self._stop_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.write(done_w, b"1" if fn() else b"0")
                os.read(self._stop_r, 1)
            finally:
                os._exit(0)
        self.result = os.read(done_r, 1) == b"1"
        os.close(done_r)
        os.close(done_w)

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        os.waitpid(self.pid, 0)


def test_the_creator_serves_until_a_migration(segment):
    assert handover.owner(segment) == handover.Owner(handover.SERVING, os.getpid(), 0)
    assert handover.describe(segment) == "serving"


def test_unclaimed_job_stays_with_the_source_and_a_late_claim_fails(segment):
    handing = handover.offer(segment)
    assert handover.describe(segment) == "handing over"
    settled = handover.settle(segment, handing)
    assert settled.here and "had not claimed" in settled.why
    assert handover.owner(segment) == handover.Owner(handover.SERVING, os.getpid(), 1)
    late = LiveChild(lambda: handover.claim(segment, handing.word))
    late.close()
    assert late.result is False
    assert handover.owner(segment).pid == os.getpid()


def test_a_live_target_that_claimed_keeps_the_job(segment):
    handing = handover.offer(segment)
    target = LiveChild(lambda: handover.claim(segment, handing.word))
    try:
        assert target.result is True
        settled = handover.settle(segment, handing)
        assert not settled.here and str(target.pid) in settled.why
        assert handover.owner(segment) == handover.Owner(handover.CLAIMED, target.pid, 1)
    finally:
        target.close()


def test_a_target_that_died_after_claiming_gives_the_job_back(segment):
    handing = handover.offer(segment)
    dead = in_child(lambda: handover.claim(segment, handing.word))
    assert handover.owner(segment) == handover.Owner(handover.CLAIMED, dead, 1)
    settled = handover.settle(segment, handing)
    assert settled.here and "died" in settled.why
    assert handover.owner(segment) == handover.Owner(handover.SERVING, os.getpid(), 1)


def test_a_target_that_began_serving_keeps_the_job_even_dead(segment):
    handing = handover.offer(segment)
    dead = in_child(lambda: handover.claim(segment, handing.word) and handover.start_serving(segment))
    settled = handover.settle(segment, handing)
    assert not settled.here
    assert handover.owner(segment) == handover.Owner(handover.SERVING, dead, 1)


def test_only_the_owner_offers_and_a_claim_serves_once(segment):
    handing = handover.offer(segment)
    with pytest.raises(handover.NotOwner):
        handover.offer(segment)                     # nobody serves it while it is handed over
    assert handover.claim(segment, handing.word)
    assert not handover.claim(segment, handing.word)
    assert handover.start_serving(segment) and handover.start_serving(segment)
    again = handover.offer(segment)                 # the new owner moves it on: a new attempt
    assert again == handover.Owner(handover.HANDING, os.getpid(), 2)
    assert not handover.claim(segment, handing.word)     # a claim of the old attempt never matches


def test_claim_racing_settle_has_exactly_one_winner(segment):
    outcomes = set()
    for _ in range(60):
        handing = handover.offer(segment)
        go_r, go_w = os.pipe()
        won_r, won_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.read(go_r, 1)
                os.write(won_w, b"1" if handover.claim(segment, handing.word) else b"0")
                if handover.owner(segment).state == handover.CLAIMED:
                    handover.start_serving(segment)
            finally:
                os._exit(0)
        os.write(go_w, b"g")
        settled = handover.settle(segment, handing)
        target_won = os.read(won_r, 1) == b"1"
        os.waitpid(pid, 0)
        for fd in (go_r, go_w, won_r, won_w):
            os.close(fd)
        assert settled.here != target_won, (settled, target_won)
        outcomes.add(target_won)
        if target_won:                              # the job is the dead child's: take the word back for the next round
            segment.owner_exchange(segment.owner, handover.Owner(handover.SERVING, os.getpid(), 0).word)
    assert outcomes                                 # (which side wins depends on the scheduler)
