"""A job's life cycle (tally/server/lifecycle.py): every (state, request) pair
answered as the module's table says, the transient states' owners and outcomes,
and the concurrent cases that raced before there was one place for them."""
from __future__ import annotations

import threading
import time

import pytest

from tally.protocol.errors import DeviceError
from tally.server.lifecycle import ALLOWED, LIVE, TRANSIENT, JobState, Lifecycle, Refused, Request

S, R = JobState, Request

# The docstring's table, written out again by hand: a change to the rules must change both.
EXPECTED = {
    R.START: {S.ATTACHING: S.RUNNING, S.RUNNING: S.RUNNING, S.PAUSED: S.PAUSED, S.SUSPENDED: S.SUSPENDED,
              S.EVICTED: S.EVICTED, S.FAULTED: S.FAULTED},
    R.PAUSE: {S.RUNNING: S.PAUSED, S.PAUSED: S.PAUSED},
    R.UNPAUSE: {S.RUNNING: S.RUNNING, S.PAUSED: S.RUNNING},
    R.SUSPEND: {S.RUNNING: S.SUSPENDING, S.PAUSED: S.SUSPENDING, S.SUSPENDED: S.SUSPENDED},
    R.RESUME: {S.SUSPENDED: S.RESUMING},
    R.MIGRATE: {S.RUNNING: S.MIGRATING},
    R.HAND_OVER: {S.ATTACHING: S.HANDED_OVER, S.RUNNING: S.HANDED_OVER, S.PAUSED: S.HANDED_OVER,
                  S.SUSPENDED: S.HANDED_OVER, S.EVICTED: S.HANDED_OVER, S.FAULTED: S.HANDED_OVER,
                  S.HANDED_OVER: S.HANDED_OVER},
    R.EVICT: {S.RUNNING: S.EVICTED, S.PAUSED: S.EVICTED, S.SUSPENDED: S.EVICTED, S.EVICTED: S.EVICTED,
              S.FAULTED: S.EVICTED},
    R.FAULT: {S.ATTACHING: S.FAULTED, S.RUNNING: S.FAULTED, S.PAUSED: S.FAULTED, S.SUSPENDED: S.FAULTED,
              S.EVICTED: S.EVICTED, S.FAULTED: S.FAULTED},
    R.CLOSE: {s: S.CLOSING for s in (S.ATTACHING, S.RUNNING, S.PAUSED, S.SUSPENDED, S.EVICTED, S.FAULTED,
                                     S.HANDED_OVER, S.CLOSING)},
}
FAILURE = DeviceError(46, "evicted: test")


def in_state(state: JobState) -> Lifecycle:
    """A lifecycle brought to `state` through its own transitions (never by assignment)."""
    life = Lifecycle()
    path = {
        S.ATTACHING: [],
        S.RUNNING: [R.START],
        S.PAUSED: [R.START, R.PAUSE],
        S.SUSPENDED: [R.START, (R.SUSPEND, True)],
        S.EVICTED: [R.START, R.EVICT],
        S.FAULTED: [R.START, R.FAULT],
        S.HANDED_OVER: [R.START, R.HAND_OVER],
        S.CLOSING: [R.START, R.CLOSE],
        S.CLOSED: [R.START, R.CLOSE, "closed"],
        S.SUSPENDING: [R.START, R.SUSPEND],
        S.RESUMING: [R.START, (R.SUSPEND, True), R.RESUME],
        S.MIGRATING: [R.START, R.MIGRATE],
    }[state]
    for step in path:
        if step == "closed":
            life.closed()
        elif isinstance(step, tuple):
            life.begin(step[0])
            life.finish(step[1], suspension="saved" if step[0] is R.SUSPEND else None)
        elif step in (R.SUSPEND, R.RESUME, R.MIGRATE):
            life.begin(step)
        elif step is R.EVICT:
            life.evict("test", FAILURE)
        elif step is R.FAULT:
            life.fault(DeviceError(999, "fault"))
        elif step is R.CLOSE:
            assert life.begin_close()
        else:
            with life.change(step):
                pass
    assert life.state is state
    return life


def test_the_table_in_the_code_is_the_table_in_the_docstring():
    code = {(s, r): after for (s, r), after in ALLOWED.items()}
    expected = {(s, r): after for r, row in EXPECTED.items() for s, after in row.items()}
    assert code == expected


@pytest.mark.parametrize("request_", list(Request), ids=lambda r: r.name)
@pytest.mark.parametrize("state", [s for s in JobState if s not in TRANSIENT], ids=lambda s: s.name)
def test_every_settled_state_answers_every_request(state, request_):
    life = in_state(state)
    allowed = EXPECTED[request_].get(state)
    if allowed is None:
        with pytest.raises(Refused) as refused:
            life.answer(request_)
        assert refused.value.request is request_ and refused.value.state is state
        assert str(refused.value).startswith("it ") or str(refused.value).startswith("a device fault")
    else:
        change = life.answer(request_)
        assert (change.before, change.after) == (state, allowed)
        assert change.changed == (allowed is not state)
    assert life.state is state            # answering changes nothing


@pytest.mark.parametrize("request_", [r for r in Request if r not in (R.FAULT, R.CLOSE)], ids=lambda r: r.name)
@pytest.mark.parametrize("state", sorted(TRANSIENT, key=lambda s: s.value), ids=lambda s: s.name)
def test_the_owner_of_a_transient_state_is_answered_against_it(state, request_):
    """Its own thread is not made to wait for itself: it is answered, and every
    request but the table's is refused."""
    life = in_state(state)
    with pytest.raises(Refused):
        life.answer(request_)


@pytest.mark.parametrize("state,ok,after", [
    (S.SUSPENDING, True, S.SUSPENDED), (S.SUSPENDING, False, S.RUNNING),
    (S.RESUMING, True, S.RUNNING), (S.RESUMING, False, S.SUSPENDED),
    (S.MIGRATING, True, S.HANDED_OVER), (S.MIGRATING, False, S.RUNNING),
])
def test_a_transient_state_ends_where_its_work_says(state, ok, after):
    life = in_state(state)
    assert life.finish(ok) is after and life.state is after
    assert life.handed_over == (after is S.HANDED_OVER)


def test_a_paused_job_suspended_and_resumed_is_paused_again():
    life = in_state(S.PAUSED)
    change = life.begin(R.SUSPEND)
    assert change.before is S.PAUSED and life.shown == "paused"
    assert life.finish(True, suspension="saved") is S.SUSPENDED and life.resumes_paused
    assert life.shown == "suspended" and life.suspension == "saved"
    life.begin(R.RESUME)
    assert life.shown == "suspended"
    assert life.finish(True) is S.PAUSED and life.suspension is None
    failed = in_state(S.PAUSED)
    failed.begin(R.SUSPEND)
    assert failed.finish(False) is S.PAUSED


def test_only_the_thread_that_began_a_transition_ends_it():
    life = in_state(S.SUSPENDING)
    errors = []
    other = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, life.finish, True)))
    other.start()
    other.join()
    assert errors and life.state is S.SUSPENDING
    with pytest.raises(RuntimeError):
        in_state(S.RUNNING).finish(True)


def test_what_status_shows_keeps_its_five_words():
    assert {s: in_state(s).shown for s in (S.ATTACHING, S.RUNNING, S.PAUSED, S.SUSPENDED, S.EVICTED, S.FAULTED,
                                           S.HANDED_OVER, S.SUSPENDING, S.RESUMING, S.MIGRATING)} == {
        S.ATTACHING: "running", S.RUNNING: "running", S.PAUSED: "paused", S.SUSPENDED: "suspended",
        S.EVICTED: "evicted", S.FAULTED: "faulted", S.HANDED_OVER: "running", S.SUSPENDING: "running",
        S.RESUMING: "suspended", S.MIGRATING: "running"}


def test_failure_is_set_by_eviction_fault_and_broken_context_only_once():
    life = in_state(S.RUNNING)
    assert life.failure is None
    broken = DeviceError(710, "assert")
    assert life.break_context(broken) and life.failure is broken
    assert not life.break_context(DeviceError(710, "again")) and life.failure is broken
    with pytest.raises(Refused, match="unusable"):
        life.answer(R.MIGRATE)
    life.evict("why", FAILURE)
    assert life.failure is FAILURE and life.evicted_reason == "why"
    assert not life.fault(DeviceError(999, "fault")) and life.failure is FAILURE   # evicted stays evicted


def test_a_leaving_job_is_refused_what_would_keep_it():
    life = in_state(S.RUNNING)
    life.leave()
    for request in (R.PAUSE, R.SUSPEND, R.MIGRATE, R.EVICT):
        with pytest.raises(Refused, match="leaving"):
            life.answer(request)
    assert life.answer(R.CLOSE).after is S.CLOSING and life.answer(R.FAULT).after is S.FAULTED


# ---- the concurrent cases ---------------------------------------------------------------

def in_thread(fn) -> tuple[threading.Thread, list]:
    out = []
    thread = threading.Thread(target=lambda: out.append(_call(fn)), daemon=True)
    thread.start()
    return thread, out


def _call(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - handed to the test
        return e


def waits(thread: threading.Thread) -> bool:
    thread.join(0.2)
    return thread.is_alive()


def test_evict_during_a_suspend_waits_and_evicts_the_suspended_job():
    life = in_state(S.RUNNING)
    life.begin(R.SUSPEND)
    thread, out = in_thread(lambda: life.evict("during suspend", FAILURE))
    assert waits(thread) and life.state is S.SUSPENDING
    life.finish(True, suspension="saved")
    thread.join(5)
    assert out[0].before is S.SUSPENDED and life.state is S.EVICTED
    assert life.take_suspension() == "saved" and life.suspension is None   # the release discards it


def test_migrate_during_pause_is_refused_with_the_reason():
    life = in_state(S.PAUSED)
    with pytest.raises(Refused, match=r"it is paused \(resume it first"):
        life.begin(R.MIGRATE)
    assert life.state is S.PAUSED


def test_two_closes_one_releases_the_other_waits_for_it():
    life = in_state(S.RUNNING)
    assert life.begin_close()
    assert not life.begin_close()             # the second caller does not release again
    thread, out = in_thread(lambda: life.wait_closed(5))
    assert waits(thread)
    life.closed()
    thread.join(5)
    assert out == [True] and life.state is S.CLOSED


def test_close_during_the_handshake_stops_the_job_from_starting():
    life = in_state(S.ATTACHING)
    life.leave()                               # its process went before its thread started
    with pytest.raises(Refused, match="leaving"):
        with life.change(R.START):
            pytest.fail("a leaving job's thread must not start")
    assert life.begin_close() and life.state is S.CLOSING


def test_close_during_a_migration_waits_for_who_serves_the_job_to_be_settled():
    life = in_state(S.RUNNING)
    life.begin(R.MIGRATE)
    thread, out = in_thread(life.begin_close)
    assert waits(thread)
    life.finish(True)
    thread.join(5)
    assert out == [True] and life.handed_over and life.state is S.CLOSING


def test_a_fault_during_a_suspend_fails_requests_at_once_and_lands_when_it_ends():
    life = in_state(S.RUNNING)
    life.begin(R.SUSPEND)
    fault = DeviceError(999, "fault")
    started = time.monotonic()
    assert life.fault(fault)                   # never waits
    assert time.monotonic() - started < 1 and life.failure is fault and life.shown == "faulted"
    assert life.finish(True, suspension="saved") is S.FAULTED
    assert life.take_suspension() == "saved"


def test_a_second_suspend_waits_for_the_first_and_finds_it_done():
    life = in_state(S.RUNNING)
    life.begin(R.SUSPEND)
    thread, out = in_thread(lambda: life.begin(R.SUSPEND))
    assert waits(thread)
    life.finish(True, suspension="saved")
    thread.join(5)
    assert not out[0].changed and out[0].after is S.SUSPENDED


def test_many_threads_asking_at_once_leave_one_consistent_state():
    """Pause, unpause, suspend/finish, evict and fault from many threads: every
    state reached is one the table allows, and the eviction is final."""
    life = in_state(S.RUNNING)
    seen: list[JobState] = []

    def suspender():
        for _ in range(50):
            try:
                if life.begin(R.SUSPEND).changed:
                    seen.append(life.state)
                    life.finish(True, suspension="s")
                    life.begin(R.RESUME)
                    life.finish(True)
            except Refused:
                pass

    def pauser():
        for _ in range(200):
            for request in (R.PAUSE, R.UNPAUSE):
                try:
                    with life.change(request) as change:
                        seen.append(change.after)
                except Refused:
                    pass

    threads = [threading.Thread(target=f) for f in (suspender, suspender, pauser, pauser)]
    for t in threads:
        t.start()
    life.evict("at last", FAILURE)
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert life.state is S.EVICTED and set(seen) <= LIVE
