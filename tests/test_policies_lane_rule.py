"""Each policy declares what the C++ data plane may do with a job's kernels
(policy.LaneRule); the plane applies the rule as given (client_plane.cpp)."""
from __future__ import annotations

import pytest

from tally.scheduler import make_policy
from tally.scheduler.policies import POLICIES
from tally.scheduler.policy import HIGH, ClientView, LaneRule

HP_RULE = LaneRule(closes_best_effort_gate=True, through_gate=False, one_unit_at_a_time=False)
BE_GATED = LaneRule(closes_best_effort_gate=False, through_gate=True, one_unit_at_a_time=True)
AT_ONCE = LaneRule(closes_best_effort_gate=False, through_gate=False, one_unit_at_a_time=False)
HP_GATED = LaneRule(closes_best_effort_gate=True, through_gate=True, one_unit_at_a_time=True)
BE_BATCHES = LaneRule(closes_best_effort_gate=False, through_gate=True, one_unit_at_a_time=True, max_batch=32)


def view(priority: str) -> ClientView:
    return ClientView(client_id=priority, priority=priority, sm_percent=None)


@pytest.mark.parametrize("policy, high, best_effort", [
    ("priority", HP_RULE, BE_BATCHES),        # Tally's: best-effort kernels wait for an idle device, in batches
    ("kernel-priority", HP_RULE, BE_GATED),
    ("fifo", HP_RULE, AT_ONCE),                # no scheduling: everything goes at once
    ("time-slice", HP_GATED, BE_GATED),        # every job waits for its turn
])
def test_each_policy_declares_its_lane_rule(policy, high, best_effort):
    assert set(POLICIES) == {"priority", "kernel-priority", "fifo", "time-slice"}   # a new one gets a row here
    p = make_policy(policy)
    assert p.lane_rule(view(HIGH)) == high
    assert p.lane_rule(view("best-effort")) == best_effort
    # the rule agrees with what the policy starts at once
    for priority in (HIGH, "best-effort"):
        assert p.lane_rule(view(priority)).through_gate == (not p.starts_at_once(view(priority)))
