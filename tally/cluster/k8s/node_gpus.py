"""The GPUs of this node as the device plugin sees them: the tally-servers found,
their latest probed state, and a version that changes whenever a state does, so
ListAndWatch streams know when to send a new device list."""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Callable

from tally.cluster.k8s.gpu_servers import GpuServer, GpuState, discover, probe

log = logging.getLogger(__name__)


class NodeGpus:
    def __init__(self, servers_dir: Path | None = None, servers: list[GpuServer] | None = None,
                 probe_timeout: float = 2.0):
        if servers_dir is None and not servers:
            raise ValueError("name the tally-servers: a servers folder (gpu<N>/server.sock) or a list")
        self.servers_dir = servers_dir
        self._fixed = servers
        self.probe_timeout = probe_timeout
        self.states: dict[int, GpuState] = {}
        self.version = 0
        self.changed = threading.Condition()
        self.on_change: list[Callable[["NodeGpus"], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def servers(self) -> list[GpuServer]:
        return list(self._fixed) if self._fixed else discover(self.servers_dir)

    def poll(self) -> bool:
        """Probe every server once; True when any GPU's state changed."""
        fresh = {s.index: probe(s, self.probe_timeout) for s in self.servers()}
        with self.changed:
            before = {i: st.state for i, st in self.states.items()}
            self.states = fresh
            changed = before != {i: st.state for i, st in fresh.items()}
            if changed:
                self.version += 1
                for i, st in sorted(fresh.items()):
                    if before.get(i) != st.state:
                        log.info("GPU %d: %s -> %s (%s)", i, before.get(i, "unknown"), st.state, st.reason)
                self.changed.notify_all()
        if changed:
            for callback in self.on_change:
                try:
                    callback(self)
                except Exception as e:  # noqa: BLE001 - a failed publish must not stop health polling
                    log.warning("publishing the GPUs' state failed: %s", e)
        return changed

    def state(self, gpu: int) -> GpuState | None:
        with self.changed:
            return self.states.get(gpu)

    def wait_for_change(self, seen_version: int, timeout: float) -> int:
        with self.changed:
            self.changed.wait_for(lambda: self.version != seen_version or self._stop.is_set(), timeout)
            return self.version

    def start(self, interval: float) -> None:
        self.poll()

        def loop():
            while not self._stop.wait(interval):
                self.poll()

        self._thread = threading.Thread(target=loop, name="tally-gpu-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self.changed:
            self.changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self, online: dict[int, str] | None = None) -> str:
        """The JSON the plugin publishes as its Node's `tally.dev/gpus` annotation (read by placement)."""
        with self.changed:
            states = sorted(self.states.items())
        return json.dumps([{
            "gpu": i, "state": st.state, "memory_total": st.memory_total, "memory_free": st.memory_free,
            "online_job_class": (online or {}).get(i),
            "best_effort_jobs": len(st.clients("best-effort")), "high_jobs": len(st.clients("high")),
        } for i, st in states], separators=(",", ":"))
