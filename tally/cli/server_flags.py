"""tally-server's flags: the parser of `tally-server [serve]` and the types its
values are checked with (each refusal names the flag and what it takes)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from tally import paths
from tally.backends.registry import CHOICES
from tally.cli.number_flags import number_flag
from tally.server.data_plane import DATA_PLANE_ENV, DATA_PLANES
from tally.server.saved_memory import DEFAULT_KEEP_BYTES
from tally.units import SizeError, parse_size

POLICIES = ("priority", "fifo", "kernel-priority", "time-slice")
HEALTH_CONFIG_ENV = "TALLY_HEALTH_CONFIG"    # --health-config's default (deploy/daemonset.yaml sets it)


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
    p.add_argument("--graph-replay", choices=("units", "nodes"), default="units",
                   help="how a CUDA graph replay the policy starts whole runs: units (one graph launch, "
                        "default) or nodes (kernel by kernel, as a best-effort replay that must stay "
                        "preemptible always runs)")
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
