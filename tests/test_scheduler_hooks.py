"""The cluster layer's extension points: registration by what a plugin implements,
and how several plugins' answers combine."""
from __future__ import annotations

import pytest

from tally.scheduler.hooks import (ALLOW, AdmissionRequest, BestEffortUnit, Code, Hooks, Status, deny,
                                   wait)

REQUEST = AdmissionRequest(pid=42, program="serve", high_priority=True, memory_quota_bytes=None, sm_percent=None)
UNIT = BestEffortUnit(client_id=3, kernel_id=9, blocks=128)


class Admit:
    def __init__(self, status):
        self.status, self.asked = status, 0

    def admit(self, request):
        self.asked += 1
        return self.status


class Gate:
    def __init__(self, status):
        self.status = status

    def gate(self, unit, now):
        return self.status


def test_a_plugin_is_registered_at_every_point_it_implements_and_nothing_else_is_accepted():
    hooks = Hooks()
    admit = Admit(ALLOW)
    hooks.register(admit)
    assert hooks.admit == [admit] and not hooks.gate and not hooks.on_sample and not hooks.observe
    with pytest.raises(TypeError, match="implements no extension point"):
        hooks.register(object())


def test_the_first_denial_wins_and_later_plugins_are_not_asked():
    hooks = Hooks()
    first, second = Admit(deny("one high-priority job per server")), Admit(ALLOW)
    hooks.register(first)
    hooks.register(second)
    status = hooks.admit_client(REQUEST)
    assert status.code is Code.DENY and status.reason == "one high-priority job per server"
    assert (first.asked, second.asked) == (1, 0)
    assert Hooks().admit_client(REQUEST) is ALLOW


def test_gates_all_allow_or_the_soonest_wait_is_returned():
    hooks = Hooks()
    for status in (ALLOW, wait(0.5, "slow"), wait(0.2, "sooner")):
        hooks.register(Gate(status))
    status = hooks.gate_best_effort(UNIT, now=1.0)
    assert (status.code, status.retry_after_s, status.reason) == (Code.WAIT, 0.2, "sooner")
    only = Hooks()
    only.register(Gate(ALLOW))
    assert only.gate_best_effort(UNIT, now=1.0).allowed


@pytest.mark.parametrize("bad", [Status(Code.DENY, "no"), Status(Code.EVICT, "out"), Status(Code.WAIT, "when?")])
def test_a_gate_answering_anything_but_allow_or_a_timed_wait_is_a_plugin_bug(bad):
    hooks = Hooks()
    hooks.register(Gate(bad))
    with pytest.raises(ValueError, match="gates answer ALLOW or WAIT"):
        hooks.gate_best_effort(UNIT, now=0.0)


def test_admit_may_not_evict():
    hooks = Hooks()
    hooks.register(Admit(Status(Code.EVICT, "no")))
    with pytest.raises(ValueError, match="may not return"):
        hooks.admit_client(REQUEST)
