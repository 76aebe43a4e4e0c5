"""tally-server: own one GPU and run every job's work on it.

    tally-server [--device N] [--backend auto|cuda|emulator|null|sim] [--socket PATH]
                 [--emulate-cc 9.0] [--emulate-driver 13.0] [--emulate-sms 8]
                 [--be-memory-quota SIZE|PCT%] [--hp-memory-reserve SIZE|PCT%] [--max-hp-jobs N]
                 [--oversubscribe [--slice-seconds S]]
    tally-server status [--socket PATH] [--json]
    tally-server set --client ID [--sm-percent P] [--memory-quota SIZE|PCT%]
    tally-server pause --client ID [--force]
    tally-server suspend --client ID [--force]
    tally-server resume --client ID
    tally-server top [--socket PATH] [--interval SECONDS]
    tally-server migrate --client ID --to SOCKET
    tally-server evict --client ID --reason TEXT [--force]
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

from tally import paths
from tally.backends.registry import BackendOptionsRefused, BackendUnavailable, make_backend, resolve_backend
from tally.protocol.framing import recv_record, send_record
from tally.protocol.messages_generated import StatusReply, StatusRequest
from tally.cli.server_flags import health_settings, serve_parser
from tally.cli.status_table import format_status  # noqa: F401 - importers use this name here
from tally.server.data_plane import default_data_plane
from tally.server.saved_memory import SavedMemoryPolicy, check_spill_dir
from tally.server.c_allocator import cap_arenas
from tally.server.status import ServerStatus

CONTROL_COMMANDS = ("set", "pause", "suspend", "resume", "migrate", "evict")     # tally/cli/control_main.py


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
    if argv and argv[0] in CONTROL_COMMANDS:
        from tally.cli.control_main import control_main
        return control_main(argv[0], argv[1:])
    return serve_main(argv)


def serve_main(argv: list[str]) -> int:
    args = serve_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="tally-server %(levelname)s %(message)s")
    # Before a second thread allocates: glibc fixes its arena limit when it makes
    # the first arena after the main one (tally/server/c_allocator.py says why).
    if not cap_arenas():
        logging.getLogger("tally.server").debug("C allocator's arenas not capped (not glibc, "
                                                 "MALLOC_ARENA_MAX or GLIBC_TUNABLES set, or too late)")
    from tally.server.metrics_endpoint import MetricsEndpoint, MetricsEndpointError
    from tally.server.server import ServerError, TallyServer
    from tally.server.server_config import ServerConfig

    socket_path = paths.server_socket(args.socket, args.device)
    options = {}
    if args.emulate_cc is not None:
        options["compute_capability"] = args.emulate_cc
    if args.emulate_driver is not None:
        options["driver_version"] = args.emulate_driver
    if args.emulate_sms is not None:
        options["sm_count"] = args.emulate_sms
    if args.suspendable and resolve_backend(args.backend) == "cuda":
        options["restorable"] = True
    try:
        backend = make_backend(args.backend, args.device, **options)
    except BackendOptionsRefused as e:
        print(f"tally-server: --emulate-cc, --emulate-driver and --emulate-sms set what the emulator reports; "
              f"the {e.backend} backend reports its own device and driver (use --backend emulator)",
              file=sys.stderr)
        return 2
    except BackendUnavailable as e:
        print(f"tally-server: {e}", file=sys.stderr)
        return 2
    try:
        health = health_settings(args)
        data_plane = args.data_plane or default_data_plane()
        if args.suspend_spill_dir is not None:
            check_spill_dir(args.suspend_spill_dir)
        for flag, value in (("--spin-us", args.spin_us), ("--hp-spin-us", args.hp_spin_us)):
            if value is not None and not value >= 0:
                raise ValueError(f"{flag} must be a number of microseconds >= 0 (inf: never sleep), got {value}")
    except ValueError as e:
        backend.close()
        print(f"tally-server: {e}", file=sys.stderr)
        return 2
    config = ServerConfig(socket_path=socket_path, device=args.device, policy=args.policy,
                          be_transform=args.be_transform, turnaround_threshold_ms=args.turnaround_threshold_ms,
                          graph_replay=args.graph_replay, spin_us=args.spin_us, hp_spin_us=args.hp_spin_us, data_plane=data_plane,
                          # share14: SM shares and compute control
                          be_sm_percent=args.be_sm_percent, dynamic_sm=args.dynamic_sm,
                          be_sm_floor=args.be_sm_floor, be_util_target=args.be_util_target,
                          sample_period_ms=args.sample_period_ms,
                          # admin14: memory protection and high-priority jobs
                          be_memory_quota=args.be_memory_quota,
                          hp_memory_reserve=args.hp_memory_reserve, max_hp_jobs=args.max_hp_jobs,
                          # susp17: suspend-based time-slicing
                          oversubscribe=args.oversubscribe, slice_seconds=args.slice_seconds,
                          # speed17: where suspended jobs' bytes wait
                          saved_memory=SavedMemoryPolicy(args.suspend_host_limit, args.suspend_spill_dir,
                                                         args.suspend_keep_host),
                          # evict15: SysProbe, graceful exit
                          drain_timeout_s=args.drain_timeout, **health)
    try:
        server = TallyServer(config, backend)
    except ValueError as e:
        backend.close()
        print(f"tally-server: {e}", file=sys.stderr)
        return 2
    metrics = None
    if args.metrics_port:
        try:
            metrics = MetricsEndpoint(server, args.metrics_host, args.metrics_port)
        except MetricsEndpointError as e:
            backend.close()
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
        server.drain.begin(signal.Signals(signum).name)

    def on_hangup(_signum, _frame):
        if server.health is None:
            logging.getLogger("tally.server").info("SIGHUP: SysProbe is off (--no-health); nothing to reload")
        else:
            server.health.reload()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    d = server.description
    print(f"tally-server: listening on {socket_path} (backend {backend.kind}, device {args.device}: {d.name}, "
          f"compute capability {d.compute_capability[0]}.{d.compute_capability[1]}, policy {args.policy}, "
          f"{data_plane} data plane)",
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
    if server.abandoned:
        # Work still on the device (the drain's deadline passed): end the process now,
        # which ends that work, instead of waiting for it in the interpreter's exit.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(server.exit_status)
    return server.exit_status       # 1 when a device fault left the GPU unusable in this process


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


if __name__ == "__main__":
    sys.exit(main())
