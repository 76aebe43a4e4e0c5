"""tally's device plugin against a kubelet stand-in speaking v1beta1 over gRPC
(tests/kubelet_standin.py) and real tally-servers (null backend), one per GPU:
registration, ListAndWatch, GPUs going unhealthy, a kubelet restart,
GetPreferredAllocation and Allocate with pod annotations read through the
Kubernetes API (tests/kube_api_standin.py), and the refusals."""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import grpc
import pytest
from k8s_support import HealthReportingServer, gpu_server
from kube_api_standin import KubeApiStandIn
from kubelet_standin import KubeletStandIn

from tally import paths
from tally.cluster.k8s.allocation import BEST_EFFORT, HIGH, RESOURCES, Layout
from tally.cluster.k8s.device_plugin import TallyDevicePlugin
from tally.cluster.k8s.kube_api import KubeApi
from tally.cluster.k8s.node_gpus import NodeGpus
from tally.cluster.k8s.plugin_server import DevicePluginRunner

HIGH_RES, BE_RES = RESOURCES[HIGH], RESOURCES[BEST_EFFORT]
NODE = "node-a"


class Node:
    """A node: tally-servers in <dir>/servers, the kubelet's folder, the plugins, the API."""

    def __init__(self, gpus: int = 2, max_sm_percent: float = 80.0):
        self.dir = Path(tempfile.mkdtemp(prefix="tally-k8s-"))
        self.servers_dir = self.dir / "servers"
        self.servers = {i: gpu_server(self.servers_dir, i) for i in range(gpus)}
        self.plugin_dir = self.dir / "device-plugins"
        self.plugin_dir.mkdir()
        self.kubelet = KubeletStandIn(self.plugin_dir)
        self.kubelet.start()
        self.api = KubeApiStandIn()
        self.api.add_node(NODE)
        kube = KubeApi.at(self.api.url)
        self.gpus = NodeGpus(self.servers_dir, probe_timeout=2.0)
        self.gpus.on_change.append(lambda g: kube.annotate_node(NODE, {"tally.dev/gpus": g.summary()}))
        self.gpus.start(interval=0.2)
        layout = Layout(lib_dir=paths.LIB_DIR)
        self.plugins = [TallyDevicePlugin(p, self.gpus, layout, best_effort_per_gpu=3, max_sm_percent=max_sm_percent,
                                          pods=lambda: kube.pods_on_node(NODE), events=kube) for p in (HIGH, BEST_EFFORT)]
        self.runner = DevicePluginRunner(self.plugins, self.plugin_dir, watch_interval=0.1)
        self.runner.start()
        self.kubelet.wait_registered({HIGH_RES, BE_RES})

    def close(self) -> None:
        self.runner.stop()
        self.gpus.stop()
        self.kubelet.stop()
        self.api.close()
        for s in self.servers.values():
            s.stop()


@pytest.fixture
def node():
    n = Node()
    yield n
    n.close()


def all_healthy(devices: dict) -> bool:
    return bool(devices) and set(devices.values()) == {"Healthy"}


def test_registers_both_resources_and_lists_units(node):
    regs = {r.resource_name: r for r in node.kubelet.registrations}
    assert regs[HIGH_RES].endpoint == "tally-high.sock" and regs[BE_RES].endpoint == "tally-best-effort.sock"
    assert all(r.version == "v1beta1" and r.options.get_preferred_allocation_available for r in regs.values())
    assert node.kubelet.wait_devices(HIGH_RES, all_healthy) == {"gpu0-high": "Healthy", "gpu1-high": "Healthy"}
    assert node.kubelet.wait_devices(BE_RES, all_healthy) == {f"gpu{g}-be{k}": "Healthy" for g in (0, 1)
                                                              for k in range(3)}
    published = json.loads(node.api.nodes[NODE]["metadata"]["annotations"]["tally.dev/gpus"])
    assert [(g["gpu"], g["state"]) for g in published] == [(0, "healthy"), (1, "healthy")]


def test_dead_server_makes_its_gpu_unhealthy_and_allocate_refuses_it(node):
    node.kubelet.wait_devices(HIGH_RES, all_healthy)
    node.servers[1].stop()
    (node.servers_dir / "gpu1" / "server.sock").unlink(missing_ok=True)
    devices = node.kubelet.wait_devices(BE_RES, lambda d: d.get("gpu1-be0") == "Unhealthy")
    assert {k: v for k, v in devices.items() if k.startswith("gpu0")} == {f"gpu0-be{k}": "Healthy" for k in range(3)}
    assert node.kubelet.wait_devices(HIGH_RES, lambda d: d.get("gpu1-high") == "Unhealthy")["gpu0-high"] == "Healthy"
    with pytest.raises(grpc.RpcError) as e:
        node.kubelet.allocate(BE_RES, ["gpu1-be0"])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "GPU 1 cannot take jobs" in e.value.details() and "no tally-server socket" in e.value.details()
    # the other GPU carries on
    assert node.kubelet.allocate(BE_RES, ["gpu0-be0"]).envs["TALLY_PRIORITY"] == "best-effort"
    published = json.loads(node.api.nodes[NODE]["metadata"]["annotations"]["tally.dev/gpus"])
    assert [(g["gpu"], g["state"]) for g in published] == [(0, "healthy"), (1, "dead")]


@pytest.mark.parametrize("state,high,best_effort", [
    ("disabled", "Unhealthy", "Unhealthy"), ("overlimit", "Healthy", "Unhealthy"),
    ("unhealthy", "Healthy", "Unhealthy"), ("healthy", "Healthy", "Healthy")])
def test_sysprobe_state_decides_health(node, state, high, best_effort):
    node.kubelet.wait_devices(HIGH_RES, all_healthy)
    node.servers[1].stop()
    sock = node.servers_dir / "gpu1" / "server.sock"
    sock.unlink(missing_ok=True)
    reporter = HealthReportingServer(sock, state)
    try:
        node.kubelet.wait_devices(HIGH_RES, lambda d: d.get("gpu1-high") == high and d.get("gpu0-high") == "Healthy")
        node.kubelet.wait_devices(BE_RES, lambda d: d.get("gpu1-be2") == best_effort)
    finally:
        reporter.close()


def test_kubelet_restart_plugin_registers_again(node):
    before = len(node.kubelet.registrations)
    node.kubelet.restart()
    node.kubelet.wait_registered({HIGH_RES, BE_RES}, after=before)
    deadline = time.monotonic() + 10
    while node.runner.registrations < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node.runner.registrations == 2
    assert node.kubelet.wait_devices(HIGH_RES, all_healthy) == {"gpu0-high": "Healthy", "gpu1-high": "Healthy"}
    node.api.add_pod("after-restart", node=NODE, resources={BE_RES: 1})
    assert node.kubelet.allocate(BE_RES, ["gpu1-be1"]).envs["TALLY_GPU"] == "1"


def test_allocate_gives_the_container_tally(node):
    node.api.add_pod("train", node=NODE, resources={BE_RES: 1},
                     annotations={"tally.dev/sm-percent": "40", "tally.dev/memory-quota": "25%"})
    r = node.kubelet.allocate(BE_RES, ["gpu1-be0"])
    assert dict(r.envs) == {
        "TALLY_SERVER": "/run/tally/server.sock", "TALLY_PRIORITY": "best-effort", "TALLY_GPU": "1",
        "LD_LIBRARY_PATH": "/usr/local/tally/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        "LD_PRELOAD": "/usr/local/tally/lib/libcuda.so.1", "TALLY_MEMORY_QUOTA": "25%", "TALLY_SM_PERCENT": "40"}
    assert [(m.container_path, m.host_path, m.read_only) for m in r.mounts] == [
        ("/run/tally", str(node.servers_dir / "gpu1"), False),
        ("/usr/local/tally/lib", str(paths.LIB_DIR), True),
        ("/dev/shm", "/dev/shm", False)]
    assert list(r.devices) == []          # only the tally-server opens the GPU
    assert dict(r.annotations) == {"tally.dev/gpu": "1", "tally.dev/priority": "best-effort"}
    node.api.add_pod("serve", node=NODE, resources={HIGH_RES: 1}, annotations={"tally.dev/memory-quota": "8G"})
    r = node.kubelet.allocate(HIGH_RES, ["gpu0-high"])
    assert r.envs["TALLY_PRIORITY"] == "high" and r.envs["TALLY_MEMORY_QUOTA"] == str(8 << 30)
    assert "TALLY_SM_PERCENT" not in r.envs


def test_sm_share_above_the_node_limit_is_refused_with_an_event(node):
    node.api.add_pod("greedy", node=NODE, resources={BE_RES: 1}, annotations={"tally.dev/sm-percent": "90"})
    with pytest.raises(grpc.RpcError) as e:
        node.kubelet.allocate(BE_RES, ["gpu0-be0"])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pod default/greedy: tally.dev/sm-percent='90' is above what this node allows a job (80%)" \
        in e.value.details()
    [event] = node.api.events
    assert (event["reason"], event["type"], event["involvedObject"]["name"]) == \
        ("TallyAllocateFailed", "Warning", "greedy")
    assert "ask for at most 80" in event["message"]


@pytest.mark.parametrize("annotation,value,expected", [
    ("tally.dev/memory-quota", "lots", "annotation tally.dev/memory-quota: memory quota 'lots'"),
    ("tally.dev/sm-percent", "forty", "tally.dev/sm-percent='forty' is not a number"),
    ("tally.dev/sm-percent", "0", "tally.dev/sm-percent='0' must be in (0, 100]"),
    ("tally.dev/gpu", "first", "tally.dev/gpu='first' is not a GPU index")])
def test_malformed_annotation_is_refused_and_the_next_pod_still_runs(node, annotation, value, expected):
    node.api.add_pod("bad", node=NODE, resources={BE_RES: 1}, annotations={annotation: value},
                     created="2026-11-25T09:00:00Z")
    with pytest.raises(grpc.RpcError) as e:
        node.kubelet.allocate(BE_RES, ["gpu0-be0"])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and expected in e.value.details()
    assert expected in node.api.events[-1]["message"]
    node.api.pods.pop(("default", "bad"))              # the kubelet fails that pod; the next one is served
    node.api.add_pod("good", node=NODE, resources={BE_RES: 1}, annotations={"tally.dev/sm-percent": "30"})
    assert node.kubelet.allocate(BE_RES, ["gpu0-be0"]).envs["TALLY_SM_PERCENT"] == "30"


def test_preferred_allocation_follows_placement_and_stays_on_one_gpu(node):
    available = [f"gpu{g}-be{k}" for g in (0, 1) for k in range(3)]
    node.api.add_pod("placed", node=NODE, resources={BE_RES: 1}, annotations={"tally.dev/gpu": "1"})
    assert node.kubelet.preferred(BE_RES, available, 1) == ["gpu1-be0"]
    node.api.pods.clear()
    assert node.kubelet.preferred(BE_RES, ["gpu0-be2", "gpu1-be0", "gpu1-be1"], 2) == ["gpu1-be0", "gpu1-be1"]


def test_units_of_two_gpus_or_two_high_units_are_refused(node):
    for resource, ids, words in ((BE_RES, ["gpu0-be0", "gpu1-be0"], "a tally job runs on one GPU"),
                                 (HIGH_RES, ["gpu0-high", "gpu1-high"], "a tally job runs on one GPU"),
                                 (BE_RES, ["nvidia0"], "is not a tally unit id")):
        with pytest.raises(grpc.RpcError) as e:
            node.kubelet.allocate(resource, ids)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in e.value.details()
