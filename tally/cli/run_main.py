"""tally-run: start a job whose CUDA work goes through a tally-server.

    tally-run [--priority high|best-effort] [--memory-quota SIZE|PCT%] [--sm-percent P] [--server PATH]
              [--no-jit-capture] -- cmd args...

It puts the directory holding tally's libcuda.so.1 first on LD_LIBRARY_PATH
(cudart dlopens "libcuda.so.1" by name), LD_PRELOADs the same file (so an
absolute-path dlopen of the real driver lands on it too), names the server and
the job's scheduling class in the environment, and runs the command as its
child (tally/cli/job_process.py): the job's stdout and stderr are its own,
signals sent to tally-run go to the job, and tally-run exits as the job did,
except that an evicted job makes it print the reason and exit 75 (EX_TEMPFAIL).
Before that it asks the server's status, and exits 2 with the server's own
sentence when the server would refuse the job at handshake (no server, a quota
the device or the server's --be-memory-quota cannot give, a high-priority job
over --max-hp-jobs), and 75 (EX_TEMPFAIL: try again later) when the server is
shutting down or SysProbe refuses best-effort jobs for now (the device is not
healthy, or in its back-off).

It also names tally's assembler wrapper where the job's JIT compilers look for
ptxas, so the PTX behind the cubins they make reaches tally (tally/jit/);
--no-jit-capture leaves the job's environment as it was for that.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from tally import paths
from tally.cli import job_process
from tally.cli.number_flags import number_flag
from tally.cli.server_main import query_status
from tally.jit.job_env import capture_environment
from tally.cluster.high_priority_jobs import AttachedJob
from tally.cluster.high_priority_jobs import refusal as high_priority_refusal
from tally.cluster.memory_limits import quota_above_server, to_bytes
from tally.units import SizeError, format_bytes, parse_size


def parse_quota(text: str) -> str:
    """Validate a quota and return its canonical env form: bytes ('1073741824') or percent ('50%')."""
    try:
        value = parse_size(text, "memory quota", allow_percent=True)
    except SizeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return f"{value:g}%" if isinstance(value, float) else str(value)


def quota_too_large(quota: str | None, status: dict) -> str | None:
    """Why the server's device cannot give this quota, or None when it can."""
    total = status.get("server", {}).get("memory_total")
    if quota is None or quota.endswith("%") or not total or int(quota) <= total:
        return None
    return (f"--memory-quota {format_bytes(int(quota))} is more than the device has "
            f"({format_bytes(total)}); ask for at most that, or a percentage (e.g. 50%)")


MPS_SHARE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
STATUS_TIMEOUT_S = 30.0


def parse_sm_percent(text: str) -> float:
    return number_flag(text, lambda v: 1 <= v <= 100,
                       f"SM share {text!r} is not a percentage of the device's SMs from 1 to 100")


def mps_share_problem(env: dict) -> str | None:
    """Why the job's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE cannot be its share, or None."""
    text = env.get(MPS_SHARE_ENV)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if 0 < value <= 100:
        return None
    return (f"{MPS_SHARE_ENV}={text!r} in the job's environment is not an SM share in (0, 100]; "
            f"fix or unset it, or give tally-run --sm-percent")


def server_refuses(priority: str, quota: str | None, status: dict) -> str | None:
    """Why the server would refuse this job at handshake, from its status (the same
    sentence the server sends), or None: tally-run says it before starting the job."""
    server = status.get("server", {})
    if priority == "high":
        # as the server counts them: a faulted or evicted job holds nothing any more
        attached = [AttachedJob(c["client_id"], c["pid"], c["program"])
                    for c in status.get("clients", [])
                    if c.get("priority") == "high" and c.get("state") not in ("faulted", "evicted")]
        max_jobs = server.get("max_hp_jobs", 1)
        if len(attached) >= max_jobs:
            return high_priority_refusal(attached, max_jobs)
        return None
    be_quota, total = server.get("be_memory_quota_bytes"), server.get("memory_total")
    if quota is None or be_quota is None or not total:
        return None
    asked = to_bytes(float(quota[:-1]), total) if quota.endswith("%") else int(quota)
    return quota_above_server(asked, be_quota) if asked > be_quota else None


def temporary_refusal(priority: str, status: dict) -> str | None:
    """Why the server refuses this job for now, or None: it is shutting down, or
    its SysProbe admits no best-effort job (high-priority jobs are never refused by
    it; a server without SysProbe has no health record)."""
    if status.get("server", {}).get("shutting_down"):
        return "tally-server is shutting down; run the job again once a tally-server runs"
    health = status.get("server", {}).get("health")
    if priority == "high" or not health or health.get("state") == "healthy":
        return None
    why = f"tally-server admits no best-effort job now: SysProbe: the device is {health.get('state')} " \
          f"({health.get('reason', '')})"
    until = health.get("backoff_until_s")
    if until:
        why += f"; its back-off ends in {max(0.0, until - time.time()):.0f} s"
    return why + "; run the job again later"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tally-run", description=__doc__.split("\n\n")[0],
                                usage="tally-run [options] -- command [args...]")
    p.add_argument("--priority", choices=("high", "best-effort"), default="best-effort",
                   help="high: latency-critical (inference); best-effort: fills idle GPU time (default)")
    p.add_argument("--memory-quota", type=parse_quota,
                   help="device memory this job may allocate: a size with a unit (8G, 512M, 4096B) "
                        "or a percentage of device memory (50%%)")
    p.add_argument("--sm-percent", type=parse_sm_percent, metavar="P",
                   help="the job's share of the device's SMs, 1-100: its kernels run on at most that many "
                        f"SMs. Without it, the job's own ${MPS_SHARE_ENV} is its share (jobs set up for MPS "
                        "keep their setting); a best-effort job gets at most tally-server's --be-sm-percent")
    p.add_argument("--server", help="the tally-server socket (default $TALLY_SERVER or the default path)")
    p.add_argument("--no-jit-capture", action="store_true",
                   help="do not record the PTX behind cubins the job's JIT compilers (Triton, ptxas) make; "
                        "their kernels then run whole, and nothing is written to the capture cache")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the job to run, after --")
    return p


def job_environment(base: dict, socket_path, priority: str, quota: str | None,
                    sm_percent: float | None = None) -> dict:
    env = dict(base)
    lib_dir = str(paths.LIB_DIR)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (lib_dir, base.get("LD_LIBRARY_PATH", "")) if p)
    preload = str(paths.CLIENT_LIBRARY)
    existing = [p for p in base.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and p != preload]
    env["LD_PRELOAD"] = ":".join([preload, *existing])
    env[paths.SERVER_ENV] = str(socket_path)
    env["TALLY_PRIORITY"] = priority
    if quota is not None:
        env["TALLY_MEMORY_QUOTA"] = quota
    else:
        env.pop("TALLY_MEMORY_QUOTA", None)
    if sm_percent is not None:
        env["TALLY_SM_PERCENT"] = f"{sm_percent:g}"
    else:
        env.pop("TALLY_SM_PERCENT", None)     # the client falls back to the job's MPS setting
    return env


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("tally-run: no command given; usage: tally-run [options] -- command [args...]", file=sys.stderr)
        return 2
    socket_path = paths.server_socket(args.server)
    if not paths.CLIENT_LIBRARY.exists():
        print(f"tally-run: the client library {paths.CLIENT_LIBRARY} is missing; reinstall tally "
              f"(pip install .)", file=sys.stderr)
        return 2
    try:
        # A server that exists answers at once unless its machine is very busy (many
        # jobs starting together): wait for it rather than call it absent.
        status = query_status(socket_path, timeout=STATUS_TIMEOUT_S)
    except TimeoutError:
        print(f"tally-run: the tally-server on {socket_path} did not answer within {STATUS_TIMEOUT_S:g} s; "
              f"is its machine overloaded? `tally-server status --socket {socket_path}` asks it again",
              file=sys.stderr)
        return 2
    except (OSError, ConnectionError):
        print(f"tally-run: no tally-server answers on {socket_path}. Start one first, e.g.\n"
              f"  tally-server --socket {socket_path} &\n"
              f"then run: tally-run --server {socket_path} -- {' '.join(command)}", file=sys.stderr)
        return 2
    refused = quota_too_large(args.memory_quota, status) or server_refuses(args.priority, args.memory_quota, status)
    if refused is None and args.sm_percent is None:
        refused = mps_share_problem(os.environ)
    if refused:
        print(f"tally-run: {refused}", file=sys.stderr)
        return 2
    later = temporary_refusal(args.priority, status)
    if later:
        print(f"tally-run: {later}", file=sys.stderr)
        return job_process.EX_TEMPFAIL
    env = job_environment(os.environ, socket_path, args.priority, args.memory_quota, args.sm_percent)
    env = capture_environment(env, enabled=not args.no_jit_capture)
    try:
        return job_process.run(command, env)
    except job_process.CannotRun as e:
        print(f"tally-run: {e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
