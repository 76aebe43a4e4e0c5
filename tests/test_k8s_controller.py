"""The placement controller against the Kubernetes API stand-in: GPUs from the
nodes' tally.dev/gpus annotations, pending pods for tally-placement, a speed
predictor trained on a small set of pairs, bindings, annotations and events."""
from __future__ import annotations

import json

import pytest
from kube_api_standin import KubeApiStandIn

from tally.cluster.k8s.allocation import BEST_EFFORT, RESOURCES
from tally.cluster.k8s.controller import PlacementController, ProfileStore
from tally.cluster.k8s.kube_api import KubeApi
from tally.cluster.placement.pairs import PairResult
from tally.cluster.placement.predictor import SpeedPredictor
from tally.cluster.placement.profile import ProfileRecord

GiB = 1 << 30
BE = RESOURCES[BEST_EFFORT]


def profile(name, role, kernel_ms, memory_gib):
    return ProfileRecord(name, role, 10.0, 0.9, 0.95, kernel_ms, 20.0, 0.0, memory_gib * GiB)


PROFILES = {"bert": profile("bert", "online", 0.03, 6), "short-kernels": profile("short-kernels", "best-effort", 0.1, 8),
            "long-kernels": profile("long-kernels", "best-effort", 3.0, 20)}


@pytest.fixture(scope="module")
def predictor():
    # jobs of short kernels fill an online job's gaps well, long ones poorly (what the sim shows)
    pairs = [PairResult("bert", load, be, share, value * (1 - load), 1.0)
             for load in (0.15, 0.35, 0.55) for share in (50.0, 70.0, 90.0)
             for be, value in (("short-kernels", 0.9), ("long-kernels", 0.4))]
    return SpeedPredictor.train("sim", pairs, PROFILES, max_iter=200)


@pytest.fixture
def api():
    standin = KubeApiStandIn()
    yield standin
    standin.close()


def gpus(*entries):
    return {"tally.dev/gpus": json.dumps([{"gpu": g, "state": s, "memory_total": 40 * GiB, "memory_free": free * GiB,
                                           "online_job_class": "bert", "best_effort_jobs": be, "high_jobs": 1}
                                          for g, s, free, be in entries])}


def test_predictor_ranks_short_kernels_higher(predictor):
    args = (PROFILES["bert"], 0.35)
    assert predictor.predict(*args, PROFILES["short-kernels"], 70) > predictor.predict(*args, PROFILES["long-kernels"], 70)


def test_one_cycle_places_by_matching_and_respects_memory_and_health(api, predictor):
    # n1/0 has room for the long-kernel job only; n1/1 is unhealthy; n2/0 is smaller; n2/1 is full
    api.add_node("n1", gpus((0, "healthy", 30, 0), (1, "unhealthy", 34, 0)))
    api.add_node("n2", gpus((0, "healthy", 12, 0), (1, "healthy", 34, 1)))
    api.add_pod("long", scheduler="tally-placement", resources={BE: 1}, annotations={"tally.dev/job-class": "long-kernels"})
    api.add_pod("short", scheduler="tally-placement", resources={BE: 1},
                annotations={"tally.dev/job-class": "short-kernels"})
    api.add_pod("bad", scheduler="tally-placement", resources={BE: 1}, annotations={"tally.dev/sm-percent": "lots"})
    api.add_pod("other", resources={BE: 1})                   # the default scheduler's: not ours
    controller = PlacementController(KubeApi.at(api.url), predictor, ProfileStore(PROFILES))
    placed = controller.cycle()
    assert sorted((p.pod["metadata"]["name"], p.slot.node, p.slot.gpu) for p in placed) == \
        [("long", "n1", 0), ("short", "n2", 0)]
    assert sorted(api.bindings) == [("default", "long", "n1"), ("default", "short", "n2")]
    assert api.pods[("default", "long")]["metadata"]["annotations"]["tally.dev/gpu"] == "0"
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in api.events}
    assert reasons == {("long", "TallyPlaced"), ("short", "TallyPlaced"), ("bad", "TallyNotPlaced")}
    bad = [e for e in api.events if e["involvedObject"]["name"] == "bad"][0]
    assert "tally.dev/sm-percent='lots' is not a number" in bad["message"]
    # the next cycle: nothing new is bound (the GPUs just used count as taken), no event repeats
    events = len(api.events)
    assert controller.cycle() == [] and len(api.events) == events


def test_matching_beats_first_come(api, predictor):
    # one GPU with room for both; the matching gives it to the job that gains most
    api.add_node("n1", gpus((0, "healthy", 30, 0)))
    api.add_pod("long", scheduler="tally-placement", resources={BE: 1}, created="2026-11-25T09:00:00Z",
                annotations={"tally.dev/job-class": "long-kernels"})
    api.add_pod("short", scheduler="tally-placement", resources={BE: 1}, created="2026-11-25T09:30:00Z",
                annotations={"tally.dev/job-class": "short-kernels"})
    [p] = PlacementController(KubeApi.at(api.url), predictor, ProfileStore(PROFILES)).cycle()
    assert p.pod["metadata"]["name"] == "short"


def test_unknown_class_uses_the_median_profile_and_says_so(api, predictor):
    api.add_node("n1", gpus((0, "healthy", 30, 0)))
    api.add_pod("mystery", scheduler="tally-placement", resources={BE: 1}, annotations={"tally.dev/job-class": "x"})
    [p] = PlacementController(KubeApi.at(api.url), predictor, ProfileStore(PROFILES)).cycle()
    assert p.pod["metadata"]["name"] == "mystery"
    assert ("mystery", "TallyDefaultProfile") in {(e["involvedObject"]["name"], e["reason"]) for e in api.events}
