"""The /metrics collector on its own: DCGM names and units from a device sample,
health and eviction figures from the status record and the server's counters
(what evict15/fault15 fill in), rendered and parsed back by prometheus_client."""
from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.metrics_exporter import TallyCollector, gpu_uuid
from tally.server.counters import ServerCounters

DEVICE = {"gpu": "0", "UUID": gpu_uuid(bytes(range(16))), "modelName": "Test GPU"}


def status(**server_extra) -> dict:
    server = {"memory_total": 8 << 30, "memory_free": 6 << 30, "scheduler": {
        "kernels_whole": 5, "kernels_sliced": 2, "kernels_ptb": 1, "preemptions": 3, "preemptions_by_planes": 2, "kernels_batched": 6,
        "graph_nodes_replayed": 480, "clients": {7: {"kernels": 4, "graph_nodes_replayed": 240}}}, **server_extra}
    client = {"client_id": 7, "pid": 4242, "priority": "best-effort", "program": "./train --lr 0.1",
              "memory_used": 1 << 30, "memory_peak": 3 << 29, "memory_quota": None,
              "memory_quota_bytes": 2 << 30, "sm_percent": 25.0, "sm_granted": 33, "state": "paused",
              "requests": 100, "errors": 1}
    return {"server": server, "clients": [client]}


def scrape(collector) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    out: dict = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_uuid_is_written_as_nvidia_smi_does():
    assert gpu_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_device_figures_use_dcgm_names_and_units():
    sample = DeviceSample(t=1.0, gpu_util_percent=87.0, sm_active_percent=62.5, hp_sm_active_percent=40.0,
                          sm_clock_mhz=1755.0, memory_used_bytes=3 << 30, memory_total_bytes=8 << 30,
                          temperature_c=71.0, power_w=312.5)
    got = scrape(TallyCollector(status, lambda: sample, ServerCounters(), DEVICE))
    labels = {"gpu": "0", "UUID": DEVICE["UUID"], "modelName": "Test GPU"}
    expected = {"DCGM_FI_DEV_GPU_UTIL": 87.0, "DCGM_FI_DEV_SM_CLOCK": 1755.0, "DCGM_FI_DEV_FB_USED": 3072.0,
                "DCGM_FI_DEV_FB_FREE": 5120.0, "DCGM_FI_DEV_GPU_TEMP": 71.0, "DCGM_FI_DEV_POWER_USAGE": 312.5,
                "DCGM_FI_PROF_SM_ACTIVE": 0.625}
    for name, value in expected.items():
        assert got[name] == [(labels, value)], name
    assert got["tally_hp_sm_active_ratio"] == [({}, 0.4)]


def test_figures_a_sample_lacks_are_left_out_and_memory_comes_from_the_status():
    got = scrape(TallyCollector(status, lambda: None, ServerCounters(), DEVICE))
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_SM_ACTIVE", "tally_hp_sm_active_ratio"):
        assert name not in got
    assert got["DCGM_FI_DEV_FB_USED"][0][1] == 2048.0 and got["DCGM_FI_DEV_FB_FREE"][0][1] == 6144.0


def test_client_scheduler_health_and_event_figures():
    counters = ServerCounters(evictions={"overlimit": 2, "operator: maintenance": 1}, device_faults=1)
    health = {"state": "overlimit", "since_s": 3.0, "transitions": []}
    got = scrape(TallyCollector(lambda: status(health=health), lambda: None, counters, DEVICE))
    me = {"client": "7", "pid": "4242", "priority": "best-effort", "program": "./train --lr 0.1"}
    assert got["tally_client_memory_used_bytes"] == [(me, float(1 << 30))]
    assert got["tally_client_memory_quota_bytes"] == [(me, float(2 << 30))]   # the quota in force
    assert got["tally_client_sm_share_percent"] == [(me, 25.0)]
    assert got["tally_client_sm_granted"] == [(me, 33.0)]
    assert got["tally_client_paused"] == [(me, 1.0)]
    assert got["tally_client_kernels_total"] == [(me, 4.0)]
    assert dict((d["mode"], v) for d, v in got["tally_kernels_total"]) == {"whole": 5, "sliced": 2, "ptb": 1}
    assert got["tally_preemptions_total"] == [({}, 3.0)]
    assert got["tally_kernels_batched_total"] == [({}, 6.0)]
    assert got["tally_preemptions_by_planes_total"] == [({}, 2.0)]
    assert got["tally_graph_nodes_replayed_total"] == [({}, 480.0)]
    assert got["tally_client_graph_nodes_replayed_total"] == [(me, 240.0)]
    assert dict((d["state"], v) for d, v in got["tally_health_state"]) == {
        "init": 0, "healthy": 0, "unhealthy": 0, "overlimit": 1, "disabled": 0}
    assert dict((d["reason"], v) for d, v in got["tally_evictions_total"]) == {
        "overlimit": 2, "operator: maintenance": 1}
    assert got["tally_device_faults_total"] == [({}, 1.0)]


@pytest.mark.parametrize("health", [None, {}])
def test_no_health_record_no_health_metric(health):
    extra = {} if health is None else {"health": health}
    assert "tally_health_state" not in scrape(TallyCollector(lambda: status(**extra), lambda: None,
                                                             ServerCounters(), DEVICE))
