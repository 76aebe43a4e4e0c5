"""The server's /metrics endpoint (tally-server --metrics-port): prometheus-client's
HTTP server on a thread, with a registry holding only tally's collector
(tally.cluster.metrics_exporter), which reads the server at each scrape.

The device sample it shows is the newest the server has; where the server takes
none (no plugin asked for samples), a scrape takes one from the backend's own
accounting.
"""
from __future__ import annotations

import logging
import threading

from prometheus_client import CollectorRegistry, start_http_server

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.metrics_exporter import TallyCollector, gpu_uuid

log = logging.getLogger("tally.server")


class MetricsEndpointError(Exception):
    """/metrics cannot be served (the port is taken, the address is not this host's...)."""


class MetricsEndpoint:
    def __init__(self, server, host: str, port: int):
        self.server, self.host = server, host
        d = server.description
        device = {"gpu": str(server.config.device), "UUID": gpu_uuid(d.uuid), "modelName": d.name}
        self._sample_lock = threading.Lock()
        self.registry = CollectorRegistry()
        self.registry.register(TallyCollector(lambda: server.status().to_json(), self._latest_sample,
                                              server.counters, device))
        try:
            self._httpd, self._thread = start_http_server(port, host, self.registry)
        except OSError as e:
            raise MetricsEndpointError(f"cannot serve /metrics on {host}:{port}: {e.strerror or e}") from e
        self.port = self._httpd.server_port      # the one bound (port 0: the system's choice)

    def _latest_sample(self) -> DeviceSample | None:
        return None

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
