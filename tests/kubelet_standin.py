"""A kubelet stand-in for the device-plugin tests: the kubelet's side of the
device-plugin API v1beta1, over the same .proto and real gRPC on unix sockets.

Like the kubelet it serves Registration on <dir>/kubelet.sock, checks each
RegisterRequest (API version, endpoint is a socket in its folder, an extended
resource name), then dials the plugin, asks GetDevicePluginOptions, keeps a
ListAndWatch stream open and records every device list it sends. `allocate`
does what the kubelet does when a container is admitted: GetPreferredAllocation
(when the plugin offers it) then Allocate, checking the answers' shapes.
`restart` is a kubelet restart: its socket goes away, every plugin socket in the
folder is removed and a new kubelet.sock appears.

No tests live here.
"""
from __future__ import annotations

import re
import stat
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from tally.cluster.k8s import deviceplugin_v1beta1_pb2 as pb
from tally.cluster.k8s import deviceplugin_v1beta1_pb2_grpc as pb_grpc

# what the kubelet accepts as an extended resource: a qualified name outside kubernetes.io
EXTENDED_RESOURCE = re.compile(r"^(?!(?:[^/]*\.)?kubernetes\.io/)[a-z0-9]([-a-z0-9.]*[a-z0-9])?/"
                               r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class PluginEndpoint:
    """The kubelet's connection to one registered plugin."""

    def __init__(self, socket: Path, request: pb.RegisterRequest):
        self.request = request
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = pb_grpc.DevicePluginStub(self.channel)
        self.options = self.stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        self.updates: list[dict[str, str]] = []
        self.stream_error: str | None = None
        self.changed = threading.Condition()
        self._stream = self.stub.ListAndWatch(pb.Empty())
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            for response in self._stream:
                devices = {}
                for d in response.devices:
                    assert d.health in ("Healthy", "Unhealthy"), f"device {d.ID} health {d.health!r}"
                    assert d.ID and d.ID not in devices, f"empty or repeated device id {d.ID!r}"
                    devices[d.ID] = d.health
                with self.changed:
                    self.updates.append(devices)
                    self.changed.notify_all()
        except grpc.RpcError as e:
            with self.changed:
                self.stream_error = f"{e.code()}: {e.details()}"
                self.changed.notify_all()

    def close(self) -> None:
        self._stream.cancel()
        self.channel.close()


class KubeletStandIn(pb_grpc.RegistrationServicer):
    def __init__(self, plugin_dir: Path):
        self.dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.plugins: dict[str, PluginEndpoint] = {}
        self.registrations: list[pb.RegisterRequest] = []
        self.rejections: list[str] = []
        self._lock = threading.Condition()
        self._server: grpc.Server | None = None

    # Registration service ------------------------------------------------------------------
    def Register(self, request, context):
        problem = self._check(request)
        if problem:
            self.rejections.append(problem)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        old = self.plugins.pop(request.resource_name, None)
        if old:
            old.close()
        endpoint = PluginEndpoint(self.dir / request.endpoint, request)
        with self._lock:
            self.plugins[request.resource_name] = endpoint
            self.registrations.append(request)
            self._lock.notify_all()
        return pb.Empty()

    def _check(self, r: pb.RegisterRequest) -> str | None:
        if r.version != "v1beta1":
            return f"unsupported device plugin API version {r.version!r}"
        if not EXTENDED_RESOURCE.match(r.resource_name):
            return f"invalid extended resource name {r.resource_name!r}"
        if not r.endpoint or "/" in r.endpoint:
            return f"endpoint {r.endpoint!r} must be a socket name in {self.dir}"
        path = self.dir / r.endpoint
        if not path.exists() or not stat.S_ISSOCK(path.stat().st_mode):
            return f"endpoint {path} is not a unix socket"
        return None

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        for p in self.plugins.values():
            p.close()
        self.plugins.clear()
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def restart(self) -> None:
        """As a kubelet restart looks to plugins: everything in the folder is removed, then a new kubelet.sock."""
        self.stop()
        for f in self.dir.iterdir():
            if f.is_socket() if hasattr(f, "is_socket") else stat.S_ISSOCK(f.stat().st_mode):
                f.unlink()
        time.sleep(0.2)
        self.start()

    # what tests ask ---------------------------------------------------------------------------
    def wait_registered(self, resources: set[str], after: int = 0, timeout: float = 20) -> None:
        with self._lock:
            ok = self._lock.wait_for(lambda: resources <= {r.resource_name for r in self.registrations[after:]}
                                     and resources <= set(self.plugins), timeout)
        assert ok, f"not registered within {timeout} s: {resources}; got {self.registrations}, " \
                   f"rejected {self.rejections}"

    def wait_devices(self, resource: str, predicate, timeout: float = 20) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            endpoint = self.plugins.get(resource)
            if endpoint is not None:
                with endpoint.changed:
                    endpoint.changed.wait_for(lambda: bool(endpoint.updates) and predicate(endpoint.updates[-1]),
                                              timeout=0.2)
                    if endpoint.updates and predicate(endpoint.updates[-1]):
                        return endpoint.updates[-1]
            if time.monotonic() > deadline:
                last = endpoint.updates[-1] if endpoint and endpoint.updates else None
                raise AssertionError(f"{resource}: device list never matched within {timeout} s; last {last}")
            time.sleep(0.05)

    def preferred(self, resource: str, available: list[str], size: int, must: list[str] = ()) -> list[str]:
        endpoint = self.plugins[resource]
        assert endpoint.options.get_preferred_allocation_available
        r = endpoint.stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=list(must),
                                                   allocation_size=size)]), timeout=10)
        assert len(r.container_responses) == 1
        chosen = list(r.container_responses[0].deviceIDs)
        assert set(chosen) <= set(available) and set(must) <= set(chosen) and len(chosen) == size, chosen
        return chosen

    def allocate(self, resource: str, ids: list[str]) -> pb.ContainerAllocateResponse:
        """Raises grpc.RpcError when the plugin refuses."""
        endpoint = self.plugins[resource]
        r = endpoint.stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=10)
        assert len(r.container_responses) == 1, "one response per container request"
        c = r.container_responses[0]
        for m in c.mounts:
            assert m.container_path.startswith("/") and m.host_path.startswith("/"), m
        for d in c.devices:
            assert d.container_path.startswith("/") and d.host_path.startswith("/") and d.permissions, d
        return c
