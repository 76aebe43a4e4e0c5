"""End to end: what the device plugin's Allocate returns runs a real CUDA program
under tally. A tally-server on the emulator owns "GPU 0" of a node; the kubelet
stand-in allocates a unit for a pod whose annotations ask for a memory quota and
an SM share; the program (nvcc-built, started as a container would start it, with
no tally-run) gets exactly the response's environment, and the response's mounts
are made in a mount namespace of its own (unshare), as a container runtime would.
The server's status (`tally-server status --json`) must show the job at the
pod's priority, quota and SM share; the job must compute correctly and be refused
memory past its quota.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from k8s_support import gpu_server
from kube_api_standin import KubeApiStandIn
from kubelet_standin import KubeletStandIn
from e2e_helpers import build_cuda, job_env

from tally import paths
from tally.cluster.k8s.allocation import BEST_EFFORT, HIGH, RESOURCES, Layout
from tally.cluster.k8s.device_plugin import TallyDevicePlugin
from tally.cluster.k8s.kube_api import KubeApi
from tally.cluster.k8s.node_gpus import NodeGpus
from tally.cluster.k8s.plugin_server import DevicePluginRunner

NODE = "node-a"
MOUNT_ROOTS = ("/run", "/usr/local")    # the "image's" folders: fresh tmpfs inside the job's namespace


def container_command(response, program: Path, own_pids: bool = False) -> list[str]:
    """A shell in a new mount namespace (and pid namespace when own_pids, as a container has)
    that makes the response's mounts, then execs the program."""
    steps = [f"mount -t tmpfs tmpfs {root}" for root in MOUNT_ROOTS]
    for m in response.mounts:
        steps.append(f"mkdir -p {shlex.quote(m.container_path)}")
        steps.append(f"mount --bind {shlex.quote(m.host_path)} {shlex.quote(m.container_path)}")
        if m.read_only:
            steps.append(f"mount -o remount,bind,ro {shlex.quote(m.container_path)}")
    steps.append(f"exec {shlex.quote(str(program))}")
    unshare = ["unshare", "--mount", "--propagation", "private", *(["--pid", "--fork"] if own_pids else [])]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    return [*unshare, "sh", "-ec", " && ".join(steps)]


@pytest.fixture
def node():
    base = Path(tempfile.mkdtemp(prefix="tally-k8s-e2e-"))
    server = gpu_server(base / "servers", 0, backend="emulator")
    plugin_dir = base / "device-plugins"
    plugin_dir.mkdir()
    kubelet = KubeletStandIn(plugin_dir)
    kubelet.start()
    api = KubeApiStandIn()
    kube = KubeApi.at(api.url)
    gpus = NodeGpus(base / "servers")
    gpus.start(interval=0.5)
    layout = Layout(lib_dir=paths.LIB_DIR)
    plugins = [TallyDevicePlugin(p, gpus, layout, pods=lambda: kube.pods_on_node(NODE), events=kube)
               for p in (HIGH, BEST_EFFORT)]
    runner = DevicePluginRunner(plugins, plugin_dir, watch_interval=0.2)
    runner.start()
    kubelet.wait_registered(set(RESOURCES.values()))
    yield kubelet, api, server
    runner.stop()
    gpus.stop()
    kubelet.stop()
    api.close()
    server.stop()


def server_status(socket: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "status", "--json", "--socket", str(socket)],
                       capture_output=True, text=True, timeout=30, check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize("priority,quota,quota_bytes", [
    (BEST_EFFORT, "64M", 64 << 20), (HIGH, "128M", 128 << 20)])
def test_allocated_container_runs_under_tally(node, nvcc, priority, quota, quota_bytes):
    run_allocated_job(node, nvcc, priority, quota, quota_bytes)


def test_allocated_container_with_its_own_pid_namespace(node, nvcc):
    # Client and server each watch the other's end of the handshake socket, not its pid,
    # which a container's pid namespace hides (the client once reported "lost tally-server" at once).
    run_allocated_job(node, nvcc, BEST_EFFORT, "64M", 64 << 20, own_pids=True)


def run_allocated_job(node, nvcc, priority, quota, quota_bytes, own_pids: bool = False):
    kubelet, api, server = node
    resource = RESOURCES[priority]
    api.add_pod("job", node=NODE, resources={resource: 1},
                annotations={"tally.dev/memory-quota": quota, "tally.dev/sm-percent": "50"})
    unit = "gpu0-high" if priority == HIGH else kubelet.preferred(resource, ["gpu0-be0", "gpu0-be1"], 1)[0]
    response = kubelet.allocate(resource, [unit])
    assert response.envs["TALLY_SM_PERCENT"] == "50"
    program = build_cuda(nvcc, "pod_job.cu")
    env = {**job_env(), **dict(response.envs)}
    for var in ("LD_LIBRARY_PATH", "LD_PRELOAD"):       # the container has only what Allocate set
        env[var] = response.envs[var]
    job = subprocess.Popen(container_command(response, program, own_pids), env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = job.stdout.readline()
        ready = job.stdout.readline()
        assert ready.strip() == "ready", f"{first}{ready}{job.stderr.read() if job.poll() is not None else ''}"
        clients = server_status(server.socket_path)["clients"]
        assert [(c["priority"], c["memory_quota"], c["sm_percent"]) for c in clients] == [(priority, quota_bytes, 50.0)]
        out, err = job.communicate("done\n", timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, err
    values = dict(tok.split("=") for tok in first.split())
    assert values == {"total": str(quota_bytes), "wrong": "0", "over_quota": "2"}   # 2: cudaErrorMemoryAllocation
    assert server_status(server.socket_path)["clients"] == []
