"""What the device plugin gives a container: the units it advertises, the pod an
Allocate is for, and the environment and mounts that make the container's own
command run under tally.

Units. Each GPU with a tally-server is offered as one `tally.dev/gpu-high` unit
(id `gpu<N>-high`: one latency-critical job per GPU) and `best_effort_per_gpu`
`tally.dev/gpu-best-effort` units (ids `gpu<N>-be<k>`). A container gets units of
one GPU only: tally runs a job on one device.

The container. Its image and command stay as they are; tally's libcuda.so.1
stands in for the CUDA driver because the response
- mounts the GPU's server folder (its socket) at /run/tally, the folder holding
  tally's client library at /usr/local/tally/lib (read-only), and the servers'
  shared-memory folder at /dev/shm (the rings and arenas are POSIX shared memory);
- sets LD_LIBRARY_PATH (tally's folder first, then the CUDA images' usual driver
  folders) and LD_PRELOAD to that library, TALLY_SERVER to the socket,
  TALLY_PRIORITY from the resource, and TALLY_MEMORY_QUOTA / TALLY_SM_PERCENT
  from the pod's annotations;
- passes no /dev/nvidia* device: only the tally-server opens the GPU.
Mount host paths are paths on the node, so the device plugin's container must
see the node's folders at the same paths (deploy/daemonset.yaml does).

Which pod. The kubelet's Allocate names device ids, not the pod. The plugin
takes the oldest pod on its node that asks for this resource in that amount and
that it has not served yet (how other sharing plugins do it); a pod the
placement controller annotated with `tally.dev/gpu` only matches units of that GPU.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tally.cluster.k8s.annotations import JobRequest, job_request
from tally.cluster.k8s.kube_api import created_at

DOMAIN = "tally.dev"
HIGH, BEST_EFFORT = "high", "best-effort"
RESOURCES = {HIGH: f"{DOMAIN}/gpu-high", BEST_EFFORT: f"{DOMAIN}/gpu-best-effort"}
UNIT_ID = re.compile(r"^gpu(\d+)-(high|be(\d+))$")


def unit_ids(priority: str, gpu: int, best_effort_per_gpu: int) -> list[str]:
    if priority == HIGH:
        return [f"gpu{gpu}-high"]
    return [f"gpu{gpu}-be{k}" for k in range(best_effort_per_gpu)]


def unit_gpu(device_id: str) -> int:
    m = UNIT_ID.match(device_id)
    if not m:
        raise ValueError(f"{device_id!r} is not a tally unit id (gpu<N>-high or gpu<N>-be<K>)")
    return int(m.group(1))


@dataclass(frozen=True)
class Layout:
    """Where things are on the node (host) and inside a job's container."""

    lib_dir: Path                                  # node: holds tally's libcuda.so.1
    shm_dir: Path = Path("/dev/shm")               # node: the tally-servers' /dev/shm
    container_server_dir: str = "/run/tally"
    container_lib_dir: str = "/usr/local/tally/lib"
    container_shm_dir: str = "/dev/shm"
    # CUDA images put the real driver here; kept after tally's folder so other libraries still resolve
    container_library_path: str = "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"


def container_response(pb, priority: str, gpu: int, socket: Path, request: JobRequest, layout: Layout):
    """A ContainerAllocateResponse (pb: the generated deviceplugin module)."""
    lib = layout.container_lib_dir
    envs = {
        "TALLY_SERVER": f"{layout.container_server_dir}/{socket.name}",
        "TALLY_PRIORITY": priority,
        "LD_LIBRARY_PATH": ":".join(p for p in (lib, layout.container_library_path) if p),
        "LD_PRELOAD": f"{lib}/libcuda.so.1",
        "TALLY_GPU": str(gpu),
    }
    if request.memory_quota is not None:
        envs["TALLY_MEMORY_QUOTA"] = request.memory_quota
    if request.sm_percent is not None:
        envs["TALLY_SM_PERCENT"] = f"{request.sm_percent:g}"
    mounts = [
        pb.Mount(container_path=layout.container_server_dir, host_path=str(socket.parent), read_only=False),
        pb.Mount(container_path=lib, host_path=str(layout.lib_dir), read_only=True),
        pb.Mount(container_path=layout.container_shm_dir, host_path=str(layout.shm_dir), read_only=False),
    ]
    return pb.ContainerAllocateResponse(envs=envs, mounts=mounts,
                                        annotations={f"{DOMAIN}/gpu": str(gpu), f"{DOMAIN}/priority": priority})


def requested(container: dict, resource: str) -> int:
    resources = container.get("resources") or {}
    amount = (resources.get("limits") or {}).get(resource) or (resources.get("requests") or {}).get(resource)
    try:
        return int(amount) if amount is not None else 0
    except (TypeError, ValueError):
        return 0


def _finished(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed") or \
        pod.get("metadata", {}).get("deletionTimestamp") is not None


class PodMatcher:
    """Finds the pod (and container) an Allocate of `count` units of `resource` on
    GPU `gpu` is for, and remembers it so the next Allocate finds the next one."""

    def __init__(self):
        self.served: set[tuple[str, str]] = set()      # (pod uid, container name)

    def match(self, pods: list[dict], resource: str, count: int, gpu: int) -> tuple[dict, str] | None:
        candidates = []
        for pod in pods:
            if _finished(pod):
                continue
            uid = pod.get("metadata", {}).get("uid", "")
            placed = (pod.get("metadata", {}).get("annotations") or {}).get(f"{DOMAIN}/gpu")
            if placed is not None and placed.isdigit() and placed != str(gpu):   # malformed: matched, then refused
                continue
            for container in pod.get("spec", {}).get("containers", []):
                if requested(container, resource) == count and (uid, container.get("name")) not in self.served:
                    candidates.append((created_at(pod), pod, container.get("name")))
                    break
        if not candidates:
            return None
        _, pod, container = min(candidates, key=lambda c: c[0])
        self.served.add((pod["metadata"].get("uid", ""), container))
        return pod, container

    def forget_missing(self, pods: list[dict]) -> None:
        live = {p.get("metadata", {}).get("uid") for p in pods}
        self.served = {s for s in self.served if s[0] in live}


def request_for(pod: dict | None, max_sm_percent: float) -> JobRequest:
    """The pod's annotations checked (AnnotationError on bad ones); no pod: defaults."""
    return JobRequest() if pod is None else job_request(pod, max_sm_percent)
