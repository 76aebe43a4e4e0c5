"""Releases a job asked for (cuMemFree, unmaps, unloads) are done exactly once,
even when the job dies before the pool thread that waits for its work runs them:
the client's close runs what is still owed. `tally-bench chaos` found the loss:
a job killed mid-cuMemFree left its allocation in no table and never freed.

BlockingCalls is driven directly here (a session needs only its id and the
request being handled); the end-to-end check is the chaos campaign's
"device memory back to baseline" (tests/test_bench_chaos.py)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from tally.server.client.blocking import BlockingCalls


def calls() -> BlockingCalls:
    return BlockingCalls(SimpleNamespace(client_id=7, current_request="MemFree", closed=False))


def test_a_release_of_a_client_closed_before_it_ran_is_done_at_the_close():
    blocking, freed = calls(), []
    blocking.close()                                       # the job died first
    release = blocking.owed(lambda: freed.append(0x1000))
    blocking.run(5, release)                               # a closed pool takes no work
    assert freed == []
    blocking.run_owed()
    blocking.run_owed()
    assert freed == [0x1000]


def test_a_release_done_by_its_request_is_not_done_again():
    blocking, freed, done = calls(), [], threading.Event()
    release = blocking.owed(lambda: freed.append(0x2000))
    blocking.run(0, lambda: (release(), done.set()))
    assert done.wait(10)
    blocking.close()
    blocking.run_owed()
    assert freed == [0x2000]
    release()                                              # a late caller does nothing either
    assert freed == [0x2000]


def test_one_failing_release_does_not_stop_the_others(caplog):
    blocking, freed = calls(), []

    def fails():
        raise RuntimeError("device gone")

    blocking.owed(fails)
    blocking.owed(lambda: freed.append(1))
    blocking.close()
    blocking.run_owed()
    assert freed == [1]
    assert "client 7: a release it asked for failed at its close: device gone" in caplog.text
