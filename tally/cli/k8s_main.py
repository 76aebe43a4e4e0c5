"""tally-k8s: tally on Kubernetes (needs the cluster extra: pip install 'tally[cluster]').

    tally-k8s servers --servers-dir /var/run/tally [--gpus N]     # one tally-server per GPU (DaemonSet)
    tally-k8s install-client --to /var/lib/tally/lib              # the client library, for Allocate's mount
    tally-k8s device-plugin --node-name NODE [...]                # the kubelet device plugin (DaemonSet)
    tally-k8s controller --predictor P --profiles J [...]         # the placement controller (Deployment)
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tally import paths

EXTRA = "pip install 'tally[cluster]'"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tally-k8s", description=__doc__.splitlines()[0])
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("servers", help="start one tally-server per GPU under --servers-dir/gpu<N>/server.sock")
    s.add_argument("--servers-dir", type=Path, default=Path("/var/run/tally"))
    s.add_argument("--gpus", default="auto", help="how many GPUs (default: as many as NVML reports, else 1)")
    s.add_argument("server_args", nargs=argparse.REMAINDER, help="after --: more tally-server options")
    i = sub.add_parser("install-client", help="copy tally's client library (libcuda.so.1) to a node folder")
    i.add_argument("--to", type=Path, default=Path("/var/lib/tally/lib"))
    d = sub.add_parser("device-plugin", help="the kubelet device plugin for tally.dev/gpu-high and "
                                             "tally.dev/gpu-best-effort")
    d.add_argument("--node-name", help="this node (for the pod lookup and the tally.dev/gpus annotation); "
                                       "without it, Allocate uses no pod annotations")
    d.add_argument("--servers-dir", type=Path, default=Path("/var/run/tally"))
    d.add_argument("--plugin-dir", type=Path, default=Path("/var/lib/kubelet/device-plugins"))
    d.add_argument("--lib-dir", type=Path, default=Path("/var/lib/tally/lib"),
                   help="node folder holding libcuda.so.1 (tally-k8s install-client)")
    d.add_argument("--shm-dir", type=Path, default=Path("/var/run/tally/shm"),
                   help="node folder the tally-servers use as /dev/shm")
    d.add_argument("--best-effort-per-gpu", type=int, default=4)
    d.add_argument("--max-sm-percent", type=float, default=100.0, help="largest SM share a pod may ask for")
    d.add_argument("--health-interval", type=float, default=2.0, help="seconds between server probes")
    d.add_argument("--api", help="Kubernetes API URL (default: in-cluster service account)")
    c = sub.add_parser("controller", help="bind best-effort pods to GPUs by maximum-weight matching")
    c.add_argument("--predictor", type=Path, required=True, help="a speed predictor (tally-bench cluster "
                                                                 "--predictor-out)")
    c.add_argument("--profiles", type=Path, required=True, help="JSON: job class -> profile record")
    c.add_argument("--scheduler-name", default="tally-placement")
    c.add_argument("--interval", type=float, default=10.0, help="seconds between placement rounds")
    c.add_argument("--best-effort-per-gpu", type=int, default=1)
    c.add_argument("--online-load", type=float, default=0.35,
                   help="online jobs' load assumed until SysProbe reports their SM activity")
    c.add_argument("--max-sm-percent", type=float, default=100.0)
    c.add_argument("--api", help="Kubernetes API URL (default: in-cluster service account)")
    return p


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _gpu_count(text: str) -> int:
    if text != "auto":
        if not text.isdigit() or int(text) < 1:
            raise SystemExit(f"tally-k8s servers: --gpus {text!r}: give a count >= 1 or auto")
        return int(text)
    try:
        import pynvml
        pynvml.nvmlInit()
        return max(1, pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - no NVML or no GPU: one device (the emulator's)
        return 1


def servers_main(args) -> int:
    extra = args.server_args[1:] if args.server_args[:1] == ["--"] else args.server_args
    folders = [args.servers_dir / f"gpu{n}" for n in range(_gpu_count(args.gpus))]
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            print(f"tally-k8s servers: cannot create {folder} ({e}); is --servers-dir right?", file=sys.stderr)
            return 2
    procs = []
    for n, folder in enumerate(folders):
        procs.append(subprocess.Popen([sys.executable, "-m", "tally.cli.server_main", "--device", str(n),
                                       "--socket", str(folder / "server.sock"), *extra]))
    stop = _stop_on_signals()
    # After the kubelet updates the mounted health ConfigMap, SIGHUP to this process reloads it in every server.
    signal.signal(signal.SIGHUP, lambda *_: [p.send_signal(signal.SIGHUP) for p in procs if p.poll() is None])
    while not stop.is_set() and all(p.poll() is None for p in procs):
        stop.wait(1.0)
    failed = [n for n, p in enumerate(procs) if p.poll() is not None]
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        p.wait()
    if failed and not stop.is_set():
        print(f"tally-k8s servers: the tally-server of GPU {failed[0]} exited ({procs[failed[0]].returncode}); "
              f"stopping the others so the container restarts", file=sys.stderr)
        return 1
    return 0


def install_client_main(args) -> int:
    if not paths.CLIENT_LIBRARY.exists():
        print(f"tally-k8s install-client: {paths.CLIENT_LIBRARY} is missing; reinstall tally", file=sys.stderr)
        return 2
    args.to.mkdir(parents=True, exist_ok=True)
    tmp = args.to / f".libcuda.so.1.{time.time_ns()}"
    shutil.copy2(paths.CLIENT_LIBRARY, tmp)
    tmp.replace(args.to / "libcuda.so.1")          # atomic: running jobs keep the file they mapped
    print(f"tally-k8s install-client: {args.to / 'libcuda.so.1'}")
    return 0


def _api(url: str | None):
    from tally.cluster.k8s.kube_api import KubeApi
    return KubeApi.at(url) if url else KubeApi.in_cluster()


def device_plugin_main(args) -> int:
    from tally.cluster.k8s.allocation import BEST_EFFORT, HIGH, Layout
    from tally.cluster.k8s.device_plugin import TallyDevicePlugin
    from tally.cluster.k8s.node_gpus import NodeGpus
    from tally.cluster.k8s.plugin_server import DevicePluginRunner
    if not 0 < args.max_sm_percent <= 100 or args.best_effort_per_gpu < 1:
        print("tally-k8s device-plugin: --max-sm-percent must be in (0, 100] and --best-effort-per-gpu >= 1",
              file=sys.stderr)
        return 2
    api = pods = None
    if args.node_name:
        api = _api(args.api)

        def pods():
            return api.pods_on_node(args.node_name)
    gpus = NodeGpus(args.servers_dir)
    plugins = [TallyDevicePlugin(p, gpus, Layout(lib_dir=args.lib_dir, shm_dir=args.shm_dir),
                                 best_effort_per_gpu=args.best_effort_per_gpu, max_sm_percent=args.max_sm_percent,
                                 pods=pods, events=api) for p in (HIGH, BEST_EFFORT)]
    if api is not None:
        high = plugins[0]
        gpus.on_change.append(lambda g: api.annotate_node(args.node_name,
                                                          {"tally.dev/gpus": g.summary(high.online)}))
    gpus.start(args.health_interval)
    runner = DevicePluginRunner(plugins, args.plugin_dir)
    runner.start()
    stop = _stop_on_signals()
    while not stop.is_set():
        stop.wait(1.0)
    runner.stop()
    gpus.stop()
    return 0


def controller_main(args) -> int:
    from tally.cluster.k8s.controller import PlacementController, ProfileStore
    from tally.cluster.placement.predictor import PredictorVersionError, SpeedPredictor
    try:
        predictor = SpeedPredictor.load(args.predictor)
        profiles = ProfileStore.from_json(json.loads(args.profiles.read_text()))
    except (OSError, ValueError, PredictorVersionError, TypeError) as e:
        print(f"tally-k8s controller: {e}", file=sys.stderr)
        return 2
    controller = PlacementController(_api(args.api), predictor, profiles, scheduler_name=args.scheduler_name,
                                     best_effort_per_gpu=args.best_effort_per_gpu, online_load=args.online_load,
                                     max_sm_percent=args.max_sm_percent)
    controller.run(args.interval, _stop_on_signals())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="tally-k8s %(levelname)s %(name)s: %(message)s")
    if args.command in ("device-plugin", "controller"):
        try:
            import grpc  # noqa: F401
            import sklearn  # noqa: F401
        except ImportError as e:
            print(f"tally-k8s {args.command} needs the cluster extra ({e}); install it with: {EXTRA}",
                  file=sys.stderr)
            return 2
    handlers = {"servers": servers_main, "install-client": install_client_main,
                "device-plugin": device_plugin_main, "controller": controller_main}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
