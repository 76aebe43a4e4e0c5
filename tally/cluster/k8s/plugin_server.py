"""Running the device plugins: their sockets, registration with the kubelet, and
re-registration when the kubelet restarts.

On start the kubelet empties its device-plugin folder and creates a new
kubelet.sock, so a plugin whose kubelet restarted has lost its socket and its
registration. Real plugins watch that folder; this one checks every `watch_interval`
seconds whether kubelet.sock is a different file than the one it registered with
(device and inode) or its own socket is gone, and then serves on a fresh socket
and registers again.
"""
from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path

import grpc

from tally.cluster.k8s import deviceplugin_v1beta1_pb2 as pb
from tally.cluster.k8s import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tally.cluster.k8s.device_plugin import TallyDevicePlugin

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class PluginServer:
    """Serves one TallyDevicePlugin on <plugin_dir>/tally-<priority>.sock."""

    def __init__(self, plugin: TallyDevicePlugin, plugin_dir: Path):
        self.plugin = plugin
        self.plugin_dir = plugin_dir
        self.socket_name = f"tally-{plugin.priority}.sock"
        self.socket = plugin_dir / self.socket_name
        self._server: grpc.Server | None = None

    def serve(self) -> None:
        self.stop()
        self.socket.unlink(missing_ok=True)
        self.plugin.stopping = False
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix=self.socket_name))
        pb_grpc.add_DevicePluginServicer_to_server(self.plugin, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def register(self, kubelet_socket: Path, timeout: float = 5.0) -> None:
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            pb_grpc.RegistrationStub(channel).Register(pb.RegisterRequest(
                version=API_VERSION, endpoint=self.socket_name, resource_name=self.plugin.resource,
                options=pb.DevicePluginOptions(pre_start_required=False,
                                               get_preferred_allocation_available=True)), timeout=timeout)
        log.info("registered %s with the kubelet (%s)", self.plugin.resource, self.socket)

    def stop(self) -> None:
        if self._server is not None:
            self.plugin.stopping = True
            self._server.stop(grace=1).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)


class DevicePluginRunner:
    """Both plugins, kept registered with whatever kubelet owns `plugin_dir`."""

    def __init__(self, plugins: list[TallyDevicePlugin], plugin_dir: Path = DEFAULT_PLUGIN_DIR,
                 watch_interval: float = 1.0):
        self.plugin_dir = plugin_dir
        self.kubelet_socket = plugin_dir / KUBELET_SOCKET
        self.servers = [PluginServer(p, plugin_dir) for p in plugins]
        self.watch_interval = watch_interval
        self.registered_with: tuple[int, int] | None = None
        self.registrations = 0
        self._stop = threading.Event()
        self._waiting_logged = False

    def ensure_registered(self) -> bool:
        """Serve and register if the kubelet is new or a socket of ours is gone; True when registered."""
        kubelet = _identity(self.kubelet_socket)
        if kubelet is None:
            if not self._waiting_logged:
                log.warning("no kubelet socket at %s yet; waiting for the kubelet", self.kubelet_socket)
                self._waiting_logged = True
            return False
        ours_present = all(s.socket.exists() for s in self.servers)
        if kubelet == self.registered_with and ours_present:
            return True
        if self.registered_with is not None:
            log.info("the kubelet restarted (or removed our sockets): serving again and re-registering")
        try:
            for s in self.servers:
                s.serve()
            for s in self.servers:
                s.register(self.kubelet_socket)
        except grpc.RpcError as e:
            log.warning("registering with the kubelet at %s failed: %s; retrying", self.kubelet_socket,
                        e.details() if hasattr(e, "details") else e)
            return False
        self.registered_with = kubelet
        self.registrations += 1
        self._waiting_logged = False
        return True

    def run(self) -> None:
        """Until stop(): keep registered."""
        while not self._stop.is_set():
            self.ensure_registered()
            self._stop.wait(self.watch_interval)
        for s in self.servers:
            s.stop()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="tally-device-plugin", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()


def plugin_dir_from_env() -> Path:
    return Path(os.environ.get("TALLY_DEVICE_PLUGIN_DIR", str(DEFAULT_PLUGIN_DIR)))
