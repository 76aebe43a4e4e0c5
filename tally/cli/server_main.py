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

from pathlib import Path

import msgpack

from tally import paths
from tally.backends.registry import (CHOICES, BackendOptionsRefused, BackendUnavailable, make_backend,
                                     resolve_backend)
from tally.protocol.framing import recv_record, send_record
from tally.protocol.messages_generated import StatusReply, StatusRequest
from tally.cli.number_flags import number_flag
from tally.cli.status_table import format_status  # noqa: F401 - importers use this name here
from tally.server.data_plane import DATA_PLANE_ENV, DATA_PLANES, default_data_plane
from tally.server.saved_memory import DEFAULT_KEEP_BYTES, SavedMemoryPolicy, check_spill_dir
from tally.server.c_allocator import cap_arenas
from tally.server.status import ServerStatus
from tally.units import SizeError, parse_size

POLICIES = ("priority", "fifo", "kernel-priority", "time-slice")
HEALTH_CONFIG_ENV = "TALLY_HEALTH_CONFIG"    # --health-config's default (deploy/daemonset.yaml sets it)
CONTROL_COMMANDS = ("set", "pause", "suspend", "resume", "migrate", "evict")     # tally/cli/control_main.py


def slice_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0.1 <= value <= 3600):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time slice in seconds between 0.1 and 3600")
    return value


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tally-server",
        description="Share one GPU between a high-priority job and best-effort jobs started with tally-run. "
                    "Subcommands: `tally-server status` reports connected clients, `tally-server top` "
                    "shows them live; `tally-server set`, `pause`, `suspend`, `resume`, `migrate` and `evict` "
                    "change a running job (each with --help).")
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
    p.add_argument("--hp-spin-us", type=float, default=None,
                   help="the same for high-priority jobs (default: --spin-us); inf keeps their server threads "
                        "polling, one CPU each while the job runs elsewhere, for the fastest answer after idle")
    p.add_argument("--emulate-cc", type=compute_capability, default=None, metavar="MAJOR.MINOR",
                   help="the compute capability the emulator reports (default 9.0): modules load only PTX "
                        "for it or older, so match the PTX your libraries ship (e.g. 12.0)")
    p.add_argument("--emulate-driver", type=cuda_version, default=None, metavar="MAJOR.MINOR",
                   help="the CUDA driver version the emulator reports (default 13.0): modules load only PTX "
                        "of an ISA version that release knows (e.g. 13.2 for PTX ISA 9.2)")
    # The data plane (tally/server/data_plane.py, docs/data-plane.md).
    p.add_argument("--data-plane", choices=DATA_PLANES, default=None,
                   help="who takes the jobs' requests off their rings: cpp (C++: launches, memsets, copies and "
                        "idle synchronizations the scheduler lets through go to the device without Python; "
                        "default) or python (every request through its Python handler); "
                        f"${DATA_PLANE_ENV} sets the default")
    p.add_argument("--emulate-sms", type=sm_count, default=None, metavar="N",
                   help="the SM count the emulator reports (default 8; an H100 has 132): what %%nsmid, the "
                        "device attributes and green-context resources say")
    # memory protection and high-priority jobs (tally/cluster/memory_limits.py, high_priority_jobs.py)
    p.add_argument("--be-memory-quota", type=size_flag("--be-memory-quota"), default=None, metavar="SIZE|PCT%",
                   help="device memory a best-effort job may hold unless it asks for less with tally-run "
                        "--memory-quota (asking for more is refused): a size with a unit (8G, 512M) or a "
                        "percentage of device memory (25%%); default: no quota")
    p.add_argument("--hp-memory-reserve", type=size_flag("--hp-memory-reserve"), default=None,
                   metavar="SIZE|PCT%",
                   help="device memory best-effort jobs can never take, kept for high-priority jobs whether or "
                        "not one is attached yet: a size with a unit or a percentage; default: none")
    p.add_argument("--max-hp-jobs", type=positive_int, default=1, metavar="N",
                   help="high-priority jobs allowed at once (default 1); another is refused at handshake")
    p.add_argument("--metrics-port", type=port_number, default=0, metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (default 0: none)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="ADDRESS",
                   help="the address /metrics listens on (default 127.0.0.1: this host only, as the metrics "
                        "name every job's program; 0.0.0.0 for a Prometheus on another host)")
    p.add_argument("--suspendable", action="store_true",
                   help="(cuda backend) back job allocations and module variables with virtual-memory "
                        "reservations, rounded up to 2 MiB (modules with variables are loaded rewritten: "
                        "docs/cuda-globals.md), so `tally-server suspend`, `migrate` (to and from other servers "
                        "with --suspendable) and --oversubscribe work on a GPU; the emulator and null backends "
                        "always can")
    p.add_argument("--oversubscribe", action="store_true",
                   help="best-effort jobs whose memory does not fit together take turns: an allocation that finds "
                        "no room waits, and the server suspends and resumes best-effort jobs (never the "
                        "high-priority one) every --slice-seconds")
    p.add_argument("--slice-seconds", type=slice_seconds, default=5.0, metavar="S",
                   help="with --oversubscribe: the time a best-effort job runs before it may be suspended for "
                        "another (default 5)")
    p.add_argument("--suspend-host-limit", type=host_size("--suspend-host-limit"), default=None, metavar="SIZE",
                   help="host memory all suspended jobs' saved device memory may take (e.g. 32G); beyond it "
                        "their bytes go to --suspend-spill-dir, or the suspension is refused and the job runs "
                        "on (default: no limit but the host's own: tally-server always leaves 2 GiB of it "
                        "available)")
    p.add_argument("--suspend-spill-dir", type=Path, default=None, metavar="DIR",
                   help="where suspended jobs' bytes go once host memory has no room for them (unlinked files, "
                        "gone with the server; use a local disk, not a tmpfs); default: none")
    p.add_argument("--suspend-keep-host", type=host_size("--suspend-keep-host"), default=DEFAULT_KEEP_BYTES,
                   metavar="SIZE",
                   help="host memory a resume keeps for the next suspension, for 30 s (copying into memory "
                        "the server has is several times faster than into new memory); 0 to keep none "
                        "(default 1G)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    add_share_flags(p)
    add_health_flags(p)
    p.add_argument("--drain-timeout", type=seconds, default=10.0, metavar="S",
                   help="on SIGTERM/SIGINT: stop admitting, let the work on the device finish for at most S "
                        "seconds, then tell every job (tally-run exits 75) and exit (default 10)")
    return p


def add_health_flags(p: argparse.ArgumentParser) -> None:
    """SysProbe (tally/server/device_health.py) and where device samples come from."""
    g = p.add_argument_group("device health (SysProbe)")
    g.add_argument("--health-config", type=Path, default=None, metavar="FILE",
                   help="SysProbe's thresholds, limits and timings (TOML; README, \"Device health\"); SIGHUP "
                        f"reloads it. Default: ${HEALTH_CONFIG_ENV} if set, else the documented defaults")
    g.add_argument("--no-health", action="store_true",
                   help="run without SysProbe: no health state, no admission refusals, no evictions by it")
    g.add_argument("--metrics-trace", type=Path, default=None, metavar="FILE",
                   help="read device samples from a recorded trace (JSON lines of samples, replayed at their "
                        "own pace) instead of the device: for demos and tests")


def add_share_flags(p: argparse.ArgumentParser) -> None:
    """SM shares and compute control (also on `tally-bench colocate`)."""
    g = p.add_argument_group("SM shares and compute control")
    g.add_argument("--be-sm-percent", type=sm_percent, default=None, metavar="P",
                   help="SM share of a best-effort job that asks for none (tally-run --sm-percent), and the "
                        "most one may ask for, in percent of the device's SMs (1-100; default: no limit)")
    g.add_argument("--dynamic-sm", action="store_true",
                   help="every sample period, best-effort jobs together get 100%% minus the high-priority "
                        "jobs' SM activity, never below --be-sm-floor, never above a job's own share")
    g.add_argument("--be-sm-floor", type=sm_percent, default=10.0, metavar="P",
                   help="with --dynamic-sm: the least share best-effort jobs get together (default 10)")
    g.add_argument("--be-util-target", type=utilization, default=None, metavar="F",
                   help="compute control: hold best-effort work back while the device's utilization "
                        "(SM activity x SM clock / max clock) is over F, in (0, 1] (default: off)")
    g.add_argument("--sample-period-ms", type=positive_ms, default=50.0, metavar="MS",
                   help="how often --dynamic-sm and --be-util-target read the device (default 50)")


def sm_percent(text: str) -> float:
    return number_flag(text, lambda v: 1 <= v <= 100,
                       f"{text!r} is not an SM share: give a percentage of the SMs from 1 to 100")


def utilization(text: str) -> float:
    return number_flag(text, lambda v: 0 < v <= 1,
                       f"{text!r} is not a utilization target: give a fraction in (0, 1], e.g. 0.9")


def positive_ms(text: str) -> float:
    return number_flag(text, lambda v: 0 < v < 1e6,
                       f"{text!r} is not a period in milliseconds (> 0)")


def seconds(text: str) -> float:
    return number_flag(text, lambda v: 0 <= v <= 86400,
                       f"{text!r} is not a number of seconds from 0 to 86400")


def size_flag(flag: str):
    def parse(text: str) -> int | float:
        try:
            return parse_size(text, flag, allow_percent=True)
        except SizeError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def host_size(flag: str):
    def parse(text: str) -> int:
        if text.strip() in ("0", "0B"):
            return 0
        try:
            return int(parse_size(text, flag))
        except SizeError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


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


def sm_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"{text!r} is not an SM count from 1 to 1024")
    return int(text)


def health_settings(args) -> dict:
    """ServerConfig's SysProbe fields from the flags; ValueError says what is wrong."""
    from tally.cluster.health_config import load_health_config
    from tally.cluster.trace_source import TraceError, read_trace

    if args.no_health and args.health_config is not None:
        raise ValueError("--no-health and --health-config contradict each other; give one")
    if args.health_config is None and not args.no_health and os.environ.get(HEALTH_CONFIG_ENV):
        args.health_config = Path(os.environ[HEALTH_CONFIG_ENV])     # the DaemonSet's ConfigMap
    if args.metrics_trace is not None:
        try:
            read_trace(args.metrics_trace)
        except (OSError, TraceError) as e:
            raise ValueError(f"--metrics-trace: {e}") from None
    config = load_health_config(args.health_config) if args.health_config is not None else None
    return {"health": not args.no_health, "health_config": config, "health_config_path": args.health_config,
            "metrics_trace": args.metrics_trace}


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
    from tally.server.server import ServerConfig, ServerError, TallyServer

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
                          spin_us=args.spin_us, hp_spin_us=args.hp_spin_us, data_plane=data_plane,
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
