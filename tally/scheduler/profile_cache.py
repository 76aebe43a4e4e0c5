"""Profiles on disk, one JSON file per GPU model, so a kernel is profiled once
per GPU model rather than once per server start.

Default place: $TALLY_PROFILE_CACHE_DIR, else $XDG_CACHE_HOME/tally/profiles,
else ~/.cache/tally/profiles. The file keeps measurements, not choices, so a
different --turnaround-threshold-ms reuses them. An unreadable file is moved
aside (kept for inspection) and a fresh one is started; nothing is lost.
"""
from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)
FORMAT_VERSION = 1


def default_cache_directory() -> Path:
    explicit = os.environ.get("TALLY_PROFILE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tally" / "profiles"


def _file_name(gpu_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", gpu_name).strip("_") + ".json"


class ProfileCache:
    def __init__(self, directory: Path | str, gpu_name: str):
        self.path = Path(directory) / _file_name(gpu_name)
        self.gpu_name = gpu_name

    def load(self) -> dict[str, dict]:
        """kernel key -> stored record; {} when there is no usable file."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
            if data.get("version") != FORMAT_VERSION or not isinstance(data.get("kernels"), dict):
                raise ValueError(f"format version {data.get('version')!r}, expected {FORMAT_VERSION}")
            return data["kernels"]
        except (ValueError, AttributeError) as e:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            os.replace(self.path, aside)
            log.warning("profile cache %s is unreadable (%s); moved it to %s and starting fresh",
                        self.path, e, aside)
            return {}

    def save(self, kernels: dict[str, dict]) -> None:
        """Write every record atomically (a crash leaves the old file or the new one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"version": FORMAT_VERSION, "gpu": self.gpu_name, "kernels": kernels}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)
