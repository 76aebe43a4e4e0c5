"""tally-server: own one GPU and run every job's work on it.

    tally-server [--device N] [--backend auto|cuda|emulator|null|sim] [--socket PATH]
                 [--emulate-cc 9.0] [--emulate-driver 13.0]
    tally-server status [--socket PATH] [--json]
    tally-server top [--socket PATH] [--interval SECONDS]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys

import msgpack

from tally import paths, protocol
from tally.backends.registry import CHOICES, BackendOptionsRefused, BackendUnavailable, make_backend
from tally.protocol.framing import recv_record, send_record
from tally.protocol.messages_generated import StatusReply, StatusRequest
from tally.server.status import ServerStatus

POLICIES = ("priority", "fifo", "kernel-priority", "time-slice")


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tally-server",
        description="Share one GPU between a high-priority job and best-effort jobs started with tally-run. "
                    "Subcommands: `tally-server status` reports connected clients, `tally-server top` "
                    "shows them live.")
    p.add_argument("--device", type=int, default=0, help="GPU index (default 0)")
    p.add_argument("--backend", choices=CHOICES, default="auto",
                   help="device backend; auto = cuda when a GPU and driver are present, else emulator")
    p.add_argument("--socket", help=f"unix socket to listen on (default ${paths.SERVER_ENV} or "
                                    f"{paths.default_socket()})")
    p.add_argument("--policy", choices=POLICIES, default="priority",
                   help="scheduling policy: priority (Tally's block-level scheduling, default), fifo (plain "
                        "sharing), kernel-priority (whole kernels by priority), time-slice (round-robin quanta)")
    p.add_argument("--be-transform", choices=("auto", "slice", "ptb", "none"), default="auto",
                   help="how best-effort kernels run under the priority policy: auto (the profiler decides), "
                        "slice, ptb, or none (whole kernels)")
    p.add_argument("--turnaround-threshold-ms", type=float, default=0.0316,
                   help="longest best-effort turnaround (slice time / PTB task time) the profiler accepts")
    p.add_argument("--spin-us", type=float, default=None,
                   help="how long a client's server thread spins for its next request before sleeping "
                        "(default: 1000 on a GPU, 20 on the CPU backends)")
    p.add_argument("--emulate-cc", type=compute_capability, default=None, metavar="MAJOR.MINOR",
                   help="the compute capability the emulator reports (default 9.0): modules load only PTX "
                        "for it or older, so match the PTX your libraries ship (e.g. 12.0)")
    p.add_argument("--emulate-driver", type=cuda_version, default=None, metavar="MAJOR.MINOR",
                   help="the CUDA driver version the emulator reports (default 13.0): modules load only PTX "
                        "of an ISA version that release knows (e.g. 13.2 for PTX ISA 9.2)")
    p.add_argument("--metrics-port", type=port_number, default=0, metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (default 0: none)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="ADDRESS",
                   help="the address /metrics listens on (default 127.0.0.1: this host only, as the metrics "
                        "name every job's program; 0.0.0.0 for a Prometheus on another host)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return p


def _major_minor(text: str, what: str) -> tuple[int, int]:
    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit() and len(minor) == 1 and 1 <= int(major) <= 99):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return int(major), int(minor)


def port_number(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0 to 65535)")
    return int(text)


def compute_capability(text: str) -> tuple[int, int]:
    return _major_minor(text, "a compute capability like 9.0 or 12.0")


def cuda_version(text: str) -> int:
    major, minor = _major_minor(text, "a CUDA version like 13.0 or 13.2")
    return major * 1000 + minor * 10


def status_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tally-server status",
                                description="Print the clients connected to a running tally-server.")
    p.add_argument("--socket", help="the server's socket (default $TALLY_SERVER or the default path)")
    p.add_argument("--json", action="store_true", help="print the raw status as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "status":
        return status_main(argv[1:])
    if argv and argv[0] == "top":
        from tally.cli.top_main import top_main
        return top_main(argv[1:], query_status)
    return serve_main(argv)


def serve_main(argv: list[str]) -> int:
    args = serve_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="tally-server %(levelname)s %(message)s")
    from tally.server.metrics_endpoint import MetricsEndpoint, MetricsEndpointError
    from tally.server.server import ServerConfig, ServerError, TallyServer

    socket_path = paths.server_socket(args.socket, args.device)
    options = {}
    if args.emulate_cc is not None:
        options["compute_capability"] = args.emulate_cc
    if args.emulate_driver is not None:
        options["driver_version"] = args.emulate_driver
    try:
        backend = make_backend(args.backend, args.device, **options)
    except BackendOptionsRefused as e:
        print(f"tally-server: --emulate-cc and --emulate-driver set what the emulator reports; the "
              f"{e.backend} backend reports its own device and driver (use --backend emulator)",
              file=sys.stderr)
        return 2
    except BackendUnavailable as e:
        print(f"tally-server: {e}", file=sys.stderr)
        return 2
    config = ServerConfig(socket_path=socket_path, device=args.device, policy=args.policy,
                          be_transform=args.be_transform, turnaround_threshold_ms=args.turnaround_threshold_ms,
                          spin_us=args.spin_us)
    server = TallyServer(config, backend)
    metrics = None
    if args.metrics_port:
        try:
            metrics = MetricsEndpoint(server, args.metrics_host, args.metrics_port)
        except MetricsEndpointError as e:
            print(f"tally-server: {e}; choose another --metrics-port (or leave it out to serve no metrics)",
                  file=sys.stderr)
            return 2
    try:
        server.bind()
    except (ServerError, OSError) as e:
        print(f"tally-server: cannot listen on {socket_path}: {e}", file=sys.stderr)
        if metrics is not None:
            metrics.close()
        return 2

    def on_signal(signum, _frame):
        logging.getLogger("tally.server").info("received %s, shutting down", signal.Signals(signum).name)
        server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    d = server.description
    print(f"tally-server: listening on {socket_path} (backend {backend.kind}, device {args.device}: {d.name}, "
          f"compute capability {d.compute_capability[0]}.{d.compute_capability[1]}, policy {args.policy})",
          flush=True)
    print(f"tally-server: run jobs with: tally-run --server {socket_path} -- ./your-program", flush=True)
    if metrics is not None:
        print(f"tally-server: Prometheus metrics at http://{args.metrics_host}:{metrics.port}/metrics", flush=True)
    try:
        server.serve_forever()
    finally:
        if metrics is not None:
            metrics.close()
    print("tally-server: stopped", flush=True)
    return 0


def query_status(socket_path, timeout: float = 2.0) -> dict:
    """Ask a running server for its status, as JSON (tally/server/status.py:
    ServerStatus.from_json reads it); raises OSError/ConnectionError when none answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(socket_path))
        send_record(sock, StatusRequest.KIND, StatusRequest().encode(), tag=1)
        kind, _tag, payload = recv_record(sock)
        if kind != StatusReply.KIND:
            raise ConnectionError(f"unexpected reply kind {kind}")
        return msgpack.unpackb(StatusReply.decode(payload).tail, strict_map_key=False)
    finally:
        sock.close()


def status_main(argv: list[str]) -> int:
    args = status_parser().parse_args(argv)
    socket_path = paths.server_socket(args.socket)
    try:
        status = query_status(socket_path)
    except (OSError, ConnectionError) as e:
        print(f"tally-server status: no tally-server answers on {socket_path} ({e}). "
              f"Start one with: tally-server --socket {socket_path}", file=sys.stderr)
        return 1
    text = json.dumps(status, indent=2) if args.json else format_status(ServerStatus.from_json(status))
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # `tally-server status | head -2`: the reader has what it wanted. Point stdout
        # at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def format_status(s: ServerStatus) -> str:
    lines = [
        f"server   pid {s.pid}  socket {s.socket}  backend {s.backend}  policy {s.policy}",
        f"device   {s.device}: {s.device_name}  compute capability {s.compute_capability}  "
        f"CUDA {s.driver_version // 1000}.{s.driver_version % 1000 // 10}  "
        f"memory {_gib(s.memory_total - s.memory_free)} "
        f"used of {_gib(s.memory_total)}  uptime {s.uptime_s:.0f} s",
        f"clients  {len(s.clients)}",
    ]
    if s.clients:
        lines.append(f"  {'id':>4} {'pid':>8} {'priority':<12} {'memory':>10} {'quota':>10} "
                     f"{'requests':>10} {'errors':>7}  program")
        for c in s.clients:
            quota = _gib(c.memory_quota) if c.memory_quota is not None else "-"
            lines.append(f"  {c.client_id:>4} {c.pid:>8} {protocol.priority_name(c.priority):<12} "
                         f"{_gib(c.memory_used):>10} {quota:>10} {c.requests:>10} {c.errors:>7}  {c.program}")
    return "\n".join(lines)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


if __name__ == "__main__":
    sys.exit(main())
