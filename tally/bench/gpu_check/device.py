"""What the kit ran on: the GPU's name and driver (nvidia-smi, else NVML), or the
CPU emulator in a rehearsal."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    name: str
    driver: str
    memory: str
    host: str

    def slug(self) -> str:
        """The name as a file name part: 'NVIDIA H200' -> 'nvidia-h200'."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") or "unknown"


def host() -> str:
    return f"{platform.node()} ({platform.machine()}, {_cores()} cores, Python {platform.python_version()})"


def _cores() -> int:
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)


def detect(rehearse: bool) -> Device:
    if rehearse:
        return Device("cpu-emulator", "none (tally's CPU emulator stands in for the GPU)", "-", host())
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False)
        first = done.stdout.strip().splitlines()[:1]
        if done.returncode == 0 and first:
            name, driver, memory = (part.strip() for part in (first[0].split(",") + ["", ""])[:3])
            return Device(name, driver, memory, host())
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total >> 20
            return Device(name if isinstance(name, str) else name.decode(), str(pynvml.nvmlSystemGetDriverVersion()),
                          f"{memory} MiB", host())
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:     # no driver: say so in the results rather than stop
        return Device("no-gpu", f"no NVIDIA driver found ({type(e).__name__})", "-", host())
