"""tally's kubelet device plugin: one DevicePlugin service per resource
(tally.dev/gpu-high, tally.dev/gpu-best-effort), speaking the kubelet's
device-plugin API v1beta1 (deviceplugin_v1beta1.proto).

- ListAndWatch sends the unit list at once and again whenever a GPU's state
  changes (gpu_servers.units_healthy says which units a state keeps Healthy).
- GetPreferredAllocation keeps a container's units on one GPU: the one the
  placement controller chose for the pod when it did, else the GPU with the most
  free units of this kind.
- Allocate answers per container (allocation.container_response); it refuses, with
  a gRPC status the kubelet shows on the pod, units of several GPUs, more than one
  high-priority unit, a GPU whose tally-server is dead or disabled, and a pod whose
  tally annotations are malformed or ask for more SM share than this node allows
  (that last one also becomes an Event on the pod).
"""
from __future__ import annotations

import logging
from typing import Callable

import grpc

from tally.cluster.k8s import deviceplugin_v1beta1_pb2 as pb
from tally.cluster.k8s import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tally.cluster.k8s.allocation import (
    HIGH,
    RESOURCES,
    Layout,
    PodMatcher,
    container_response,
    request_for,
    requested,
    unit_gpu,
    unit_ids,
)
from tally.cluster.k8s.annotations import AnnotationError, pod_name
from tally.cluster.k8s.gpu_servers import DEAD, units_healthy
from tally.cluster.k8s.kube_api import created_at
from tally.cluster.k8s.node_gpus import NodeGpus

log = logging.getLogger(__name__)

HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
PodSource = Callable[[], list]          # the pods on this node, as API dicts


class AllocateRefused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


class TallyDevicePlugin(pb_grpc.DevicePluginServicer):
    def __init__(self, priority: str, gpus: NodeGpus, layout: Layout, *, best_effort_per_gpu: int = 4,
                 max_sm_percent: float = 100.0, pods: PodSource | None = None, events=None):
        self.priority = priority
        self.resource = RESOURCES[priority]
        self.gpus = gpus
        self.layout = layout
        self.best_effort_per_gpu = best_effort_per_gpu
        self.max_sm_percent = max_sm_percent
        self.pods = pods
        self.events = events                 # KubeApi or None
        self.matcher = PodMatcher()
        self.online: dict[int, str] = {}     # GPU -> job class of the high-priority pod allocated there
        self.stopping = False

    # what is advertised -------------------------------------------------------------------
    def devices(self) -> list:
        out = []
        for gpu, state in sorted(self.gpus.states.items()):
            high_ok, be_ok = units_healthy(state.state)
            health = HEALTHY if (high_ok if self.priority == HIGH else be_ok) else UNHEALTHY
            out += [pb.Device(ID=i, health=health) for i in unit_ids(self.priority, gpu, self.best_effort_per_gpu)]
        return out

    # the service ----------------------------------------------------------------------------
    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        seen = -1
        sent = None
        while context.is_active() and not self.stopping:
            version = self.gpus.version
            if version != seen:
                devices = self.devices()
                key = [(d.ID, d.health) for d in devices]
                if key != sent:
                    yield pb.ListAndWatchResponse(devices=devices)
                    sent = key
                seen = version
            self.gpus.wait_for_change(seen, timeout=1.0)

    def GetPreferredAllocation(self, request, context):
        responses = []
        for creq in request.container_requests:
            available = list(creq.available_deviceIDs)
            must = list(creq.must_include_deviceIDs)
            size = creq.allocation_size
            placed = self._placed_gpu(size)
            by_gpu: dict[int, list[str]] = {}
            for d in available:
                by_gpu.setdefault(unit_gpu(d), []).append(d)
            must_gpus = {unit_gpu(d) for d in must}
            if must_gpus:
                order = sorted(must_gpus)
            elif placed is not None and len(by_gpu.get(placed, [])) >= size:
                order = [placed]
            else:
                order = sorted(by_gpu, key=lambda g: (-len(by_gpu[g]), g))
            chosen = list(must)
            for g in order:
                for d in sorted(by_gpu.get(g, [])):
                    if len(chosen) >= size:
                        break
                    if d not in chosen:
                        chosen.append(d)
                if len(chosen) >= size:
                    break
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen[:max(size, len(must))]))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        try:
            return pb.AllocateResponse(container_responses=[self._allocate_container(list(c.devices_ids))
                                                            for c in request.container_requests])
        except AllocateRefused as e:
            log.warning("Allocate refused: %s", e)
            context.abort(e.code, str(e))

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()

    # helpers ---------------------------------------------------------------------------------
    def _allocate_container(self, ids: list[str]):
        if not ids:
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT, f"Allocate of {self.resource} named no device")
        try:
            gpus = sorted({unit_gpu(d) for d in ids})
        except ValueError as e:
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        if len(gpus) != 1:
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"units {ids} are on GPUs {gpus}; a tally job runs on one GPU: ask for "
                                  f"{self.resource} units of one GPU (normally 1)")
        if self.priority == HIGH and len(ids) > 1:
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"a container asked for {len(ids)} {self.resource} units; a GPU has one "
                                  f"high-priority slot: ask for 1")
        gpu = gpus[0]
        state = self.gpus.state(gpu)
        if state is None or state.state in (DEAD, "disabled"):
            why = state.reason if state else "no tally-server was found for it"
            raise AllocateRefused(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"GPU {gpu} cannot take jobs: {why}. Check the tally-server container of "
                                  f"the tally DaemonSet on this node (kubectl logs); the pod will be retried")
        pod = self._pod_for(len(ids), gpu)
        try:
            job = request_for(pod, self.max_sm_percent)
        except AnnotationError as e:
            if self.events is not None and pod is not None:
                self.events.event(pod, "TallyAllocateFailed", str(e))
            if pod is not None:
                self.matcher.served.discard((pod["metadata"].get("uid", ""), self._container_of(pod, len(ids))))
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        if self.priority == HIGH and pod is not None:
            self.online[gpu] = job.job_class or pod_name(pod)
        log.info("allocated %s to %s on GPU %d (sm %s, quota %s)", ids, pod_name(pod) if pod else "a pod",
                 gpu, job.sm_percent, job.memory_quota)
        return container_response(pb, self.priority, gpu, state.server.socket, job, self.layout)

    def _pods(self) -> list:
        if self.pods is None:
            return []
        try:
            pods = self.pods()
        except Exception as e:  # noqa: BLE001 - the API may be unreachable: allocate with defaults
            log.warning("cannot list this node's pods (%s); allocating without the pod's annotations", e)
            return []
        self.matcher.forget_missing(pods)
        return pods

    def _pod_for(self, count: int, gpu: int) -> dict | None:
        found = self.matcher.match(self._pods(), self.resource, count, gpu)
        return found[0] if found else None

    def _placed_gpu(self, count: int) -> int | None:
        """The GPU placement chose for the oldest pod still waiting for `count` units, if any."""
        waiting = [p for p in self._pods() if any(requested(c, self.resource) == count
                                                   for c in p.get("spec", {}).get("containers", []))
                   and not any(s[0] == p["metadata"].get("uid") for s in self.matcher.served)]
        if not waiting:
            return None
        pod = min(waiting, key=created_at)
        placed = (pod["metadata"].get("annotations") or {}).get("tally.dev/gpu")
        return int(placed) if placed is not None and placed.isdigit() else None

    def _container_of(self, pod: dict, count: int) -> str | None:
        for c in pod.get("spec", {}).get("containers", []):
            if requested(c, self.resource) == count:
                return c.get("name")
        return None
