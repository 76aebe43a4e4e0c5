"""What JIT capture adds to a job's nvJitLink links (client_preload/src/jit_capture/
nvjitlink_capture.h): tests/cuda/programs/nvjitlink_cubin.cu times its link, from
nvJitLinkCreate to the cubin in hand, under tally-run on an emulator server, three ways
in the same run, alternating round by round:

- off: `--no-jit-capture` (the baseline: nvJitLink itself, nothing followed);
- first: capture on with an empty cache, so the link is recorded (one PTX input: the
  input kept and written; two PTX inputs: also linked again by tally's linker on the
  server; two LTO-IR inputs: also nvJitLink's second link with -ptx);
- again: capture on with the cache the first link filled (the record found, nothing made).

Reported: median link microseconds of 7 rounds per way and input kind, and first/off,
again/off. No target: the first link of each kernel pays once per cache; the figures say
how much.

Run: python -m pytest bench/bench_jit_capture.py -q
"""
from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from server_harness import ServerProcess  # noqa: E402
from e2e_helpers import build_cuda, cuda_wheel_home, job_command, job_env  # noqa: E402
from test_e2e_nvjitlink_capture import PROGRAM, flags  # noqa: E402

ROUNDS = 7


def link_us(socket: Path, program: Path, inputs: str, cache: Path, capture: bool) -> int:
    cmd = job_command(socket, program, "dlopen", inputs)
    if not capture:
        cmd.insert(cmd.index("--"), "--no-jit-capture")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**job_env(), "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stdout + done.stderr
    values = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    assert values.get("bad", "0") == "0", done.stdout
    return int(values["link_us"])


def test_what_capture_adds_to_an_nvjitlink_link(tmp_path, figures, nvcc):
    homes = cuda_wheel_home("nvJitLink.h", "libnvJitLink.so.13"), cuda_wheel_home("nvrtc.h", "libnvrtc.so.13")
    assert None not in homes, "pip install -e '.[test]' (nvidia-nvjitlink, nvidia-cuda-nvrtc)"
    program = build_cuda(nvcc, PROGRAM, flags=flags(*homes, linked=False))
    server = ServerProcess(tmp_path / "s.sock", backend="emulator")
    try:
        for inputs in ("one", "two", "lto"):
            times = {"off": [], "first": [], "again": []}
            for r in range(ROUNDS):
                cache = tmp_path / f"{inputs}-{r}"
                times["off"].append(link_us(server.socket_path, program, inputs, tmp_path / "unused", False))
                times["first"].append(link_us(server.socket_path, program, inputs, cache, True))
                times["again"].append(link_us(server.socket_path, program, inputs, cache, True))
            medians = {way: statistics.median(values) for way, values in times.items()}
            figures.add(f"nvJitLink link with JIT capture, {inputs} (medians of {ROUNDS}, us)",
                        f"off {medians['off']:.0f}, first {medians['first']:.0f}, again {medians['again']:.0f}; "
                        f"first/off {medians['first'] / medians['off']:.2f}, "
                        f"again/off {medians['again'] / medians['off']:.2f}")
    finally:
        server.stop()
