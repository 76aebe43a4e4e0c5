"""A tally-server whose backend is `cuda`, for running under tally-run: the cuda
backend's driver is then tally's own libcuda.so.1, which forwards every call to
another tally-server (on the emulator). So the whole cuda backend (module loading,
launches of transformed kernels, events, host functions, copies, virtual memory)
runs without a GPU. tally-server --backend cuda refuses tally's own driver on
purpose (a user would mean a GPU); tests build the server here instead.

Usage: python tests/nested_cuda_server.py SOCKET [POLICY [BE_TRANSFORM [OPTION...]]]
(OPTION "metrics": serve /metrics on a port of the system's choosing, printed; "suspendable":
the backend's allocations and module variables are reservations, so jobs can be suspended and migrated:
tally-server --suspendable; "turnaround-ms=X": tally-server --turnaround-threshold-ms X.)"""
from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

from tally.backends.cuda import CudaBackend
from tally.server.metrics_endpoint import MetricsEndpoint
from tally.server.server import TallyServer
from tally.server.server_config import ServerConfig


def main() -> int:
    socket_path, policy = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "priority")
    be_transform = sys.argv[3] if len(sys.argv) > 3 else "auto"
    restorable = "suspendable" in sys.argv[4:]     # tally-server --suspendable
    logging.basicConfig(level=logging.INFO, format="nested tally-server %(levelname)s %(message)s")
    # spin like the CPU backends: the emulator underneath needs the cores
    turnaround = [float(o.split("=", 1)[1]) for o in sys.argv[4:] if o.startswith("turnaround-ms=")]
    config = ServerConfig(socket_path=Path(socket_path), policy=policy, be_transform=be_transform, spin_us=20.0,
                          **({"turnaround_threshold_ms": turnaround[-1]} if turnaround else {}))
    server = TallyServer(config, CudaBackend(0, restorable=restorable))
    if "metrics" in sys.argv[4:]:    # before the socket appears: the port is known by then
        print(f"metrics on port {MetricsEndpoint(server, '127.0.0.1', 0).port}", flush=True)
    server.bind()
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    print(f"listening on {socket_path}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
