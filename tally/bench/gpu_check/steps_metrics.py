"""The NVML step: a tally-server with /metrics on this device, scraped twice a
few seconds apart; the figures are the device gauges it shows (DCGM's names:
NVML's readings on a GPU, tally's own accounting elsewhere).

    python -m tally.bench.gpu_check.steps_metrics --backend cuda --out metrics.json
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tally.bench.gpu_check.step import Mode, Step, read_json
from tally.cli import commands

SCRAPES, GAP_S, START_TIMEOUT_S = 2, 3.0, 60.0
# What NVML gives and tally's own accounting does not: present only on a GPU.
NVML_ONLY = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, list[dict]]:
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return {f.name: [{"labels": s.labels, "value": s.value} for s in f.samples]
            for f in text_string_to_metric_families(text)}


def measure(backend: str) -> dict:
    """Start a server on `backend` with /metrics, scrape it, stop it; the device gauges."""
    work = Path(tempfile.mkdtemp(prefix="tally-gpu-check-metrics-"))
    port = _free_port()
    argv = [*commands.python_module("tally.cli.server_main"), "--backend", backend, "--socket",
            str(work / "server.sock"), "--metrics-port", str(port)]
    log = (work / "server.log").open("w")
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "metrics at http" not in (work / "server.log").read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tally-server did not serve /metrics (exit {server.poll()}):\n"
                                   + (work / "server.log").read_text()[-2000:])
            time.sleep(0.1)
        scrapes = []
        for i in range(SCRAPES):
            if i:
                time.sleep(GAP_S)
            scrapes.append(scrape(port))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    last = scrapes[-1]
    dcgm = {name: samples[0]["value"] for name, samples in sorted(last.items())
            if name.startswith("DCGM_") and samples}
    labels = next((s[0]["labels"] for n, s in last.items() if n.startswith("DCGM_") and s), {})
    return {"backend": backend, "scrapes": len(scrapes), "device_gauges": dcgm,
            "model_name": labels.get("modelName"), "nvml_readings": all(n in dcgm for n in NVML_ONLY),
            "tally_families": sorted(n for n in last if n.startswith("tally_"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="steps_metrics", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cuda", "emulator"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    figures = measure(args.backend)
    args.out.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    print(f"/metrics on the {args.backend} backend: device {figures['model_name']}, "
          f"NVML readings {'present' if figures['nvml_readings'] else 'absent'}: "
          + ", ".join(f"{k} {v:g}" for k, v in figures["device_gauges"].items()))
    # On a GPU the NVML readings are the point of the step: their absence is a failure.
    return 0 if figures["nvml_readings"] or args.backend != "cuda" else 1


def _commands(mode: Mode) -> list[list[str]]:
    return [[*commands.python_module("tally.bench.gpu_check.steps_metrics"),
             "--backend", "emulator" if mode.rehearse else "cuda", "--out", str(mode.out / "metrics.json")]]


def _figures(mode: Mode, output: str) -> dict:
    return read_json(mode.out / "metrics.json") or {}


NVML_METRICS = Step(
    key="nvml-metrics", title="NVML readings through /metrics",
    what="tally-server --metrics-port on the device: the DCGM-named gauges NVML fills (utilization, memory, "
         "clocks, temperature, power)",
    budget_s=10, quick_budget_s=10, commands=_commands, figures=_figures)


if __name__ == "__main__":
    sys.exit(main())
