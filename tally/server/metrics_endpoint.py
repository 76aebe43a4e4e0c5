"""The server's /metrics endpoint (tally-server --metrics-port): prometheus-client's
HTTP server on a thread, with a registry holding only tally's collector
(tally.cluster.metrics_exporter), which reads the server at each scrape.

The device sample it shows is the newest the server's sampler took (whatever
source the server samples: NVML on a GPU, tally's own accounting elsewhere);
where the server samples nothing (no plugin asked for samples), each scrape takes
one from tally's own accounting, covering the time since the previous scrape.
"""
from __future__ import annotations

import threading
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.executor_source import ExecutorActivitySource
from tally.cluster.metrics_exporter import TallyCollector, gpu_uuid
from tally.server.ports import ExecutorPort


class MetricsEndpointError(Exception):
    """/metrics cannot be served (the port is taken, the address is not this host's...)."""


class MetricsHost(Protocol):
    """What /metrics reads: the status record, and where samples come from."""

    description: Any
    config: Any
    executor: ExecutorPort
    backend: Any
    levers: Any
    counters: Any

    def status(self) -> Any: ...


class MetricsEndpoint:
    def __init__(self, server: MetricsHost, host: str, port: int):
        self.server, self.host = server, host
        d = server.description
        device = {"gpu": str(server.config.device), "UUID": gpu_uuid(d.uuid), "modelName": d.name}
        self._own_source = ExecutorActivitySource(server.executor, server.backend.mem_info)
        self._sample_lock = threading.Lock()       # scrapes may come at once; the source keeps its last reading
        self.registry = CollectorRegistry()
        self.registry.register(TallyCollector(lambda: server.status().to_json(), self._latest_sample,
                                              server.counters, device))
        try:
            self._httpd, self._thread = start_http_server(port, host, self.registry)
        except OSError as e:
            raise MetricsEndpointError(f"cannot serve /metrics on {host}:{port}: {e.strerror or e}") from e
        self.port = self._httpd.server_port      # the one bound (port 0: the system's choice)

    def _latest_sample(self) -> DeviceSample | None:
        sampler = self.server.levers.sampler
        if sampler is not None and sampler.latest is not None:
            return sampler.latest
        with self._sample_lock:
            return self._own_source.sample()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
