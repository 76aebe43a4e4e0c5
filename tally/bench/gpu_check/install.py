"""The install the GPU machine does (tools/gpu_check.sh), and its rehearsal:
the same pip command, with no network, into a fresh Python 3.12 venv that first
gets what the GPU machine's image already has."""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

WHEELS_FILE = Path(__file__).resolve().parent / "wheels.txt"
WHEELS_DIR = ".gpu-wheels"            # tools/gpu_wheels.sh's folder (git-ignored), carried to the device
IMAGE_WHEELS_DIR = ".gpu-wheels-image"   # the rehearsal's stand-in for the image's packages (never carried)
# tools/gpu_check.sh runs exactly this (tests/test_gpu_check.py holds the two together).
INSTALL_FLAGS = ("--no-index", "--no-build-isolation", "--find-links")


def read_wheels(path: Path = WHEELS_FILE) -> dict[str, list[str]]:
    """{'carry': [...], 'image': [...]}: the requirement lines of each section."""
    sections: dict[str, list[str]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        elif current is None or "==" not in line:
            raise ValueError(f"{path}: {raw!r} is not a pinned requirement (name==version) under [carry] or [image]")
        else:
            current.append(line)
    return sections


def build_requirements(repo: Path) -> list[str]:
    """pyproject's build requirements: --no-build-isolation builds with what is installed."""
    try:
        import tomllib
    except ImportError:         # Python 3.10
        import tomli as tomllib
    return list(tomllib.loads((repo / "pyproject.toml").read_text())["build-system"]["requires"])


def build_requirements_argv(python: str, wheels: Path, repo: Path) -> list[str]:
    return [python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), *build_requirements(repo)]


def install_argv(python: str, wheels: Path, repo: Path) -> list[str]:
    return [python, "-m", "pip", "install", *INSTALL_FLAGS, str(wheels), str(repo)]


# Installed beside tally for the kit itself (tools/gpu_check.sh runs tools_argv too).
KIT_TOOLS = ("py-spy",)


def tools_argv(python: str, wheels: Path) -> list[str]:
    return [python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), *KIT_TOOLS]


def offline_env() -> dict:
    """The environment with no pip configuration: no index, no find-links, no constraints
    but the command's own, as on the GPU machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def missing_wheels(wheels: Path, requirements: list[str]) -> list[str]:
    """The requirements that have no wheel in `wheels`."""
    names = [p.name.lower() for p in wheels.glob("*.whl")] if wheels.is_dir() else []
    missing = []
    for req in requirements:
        name, version = req.split("==")
        stem = name.lower().replace("-", "_")
        if not any(n.startswith(f"{stem}-{version}-") for n in names):
            missing.append(req)
    return missing


def rehearse_install(repo: Path, wheels: Path, image_wheels: Path, python: str, log: Path) -> dict:
    """Fresh venv, the image's packages, then the carried install; the result for the report."""
    begin = time.monotonic()
    venv = Path(tempfile.mkdtemp(prefix="tally-gpu-check-venv-"))
    env = offline_env()
    chosen = read_wheels()
    steps = [[python, "-m", "venv", str(venv)],
             [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(image_wheels),
              *chosen["image"]],
             build_requirements_argv(str(venv / "bin/python"), wheels, repo),
             install_argv(str(venv / "bin/python"), wheels, repo),
             tools_argv(str(venv / "bin/python"), wheels),
             # what the GPU run needs first: the C++ core loads and the kit starts
             [str(venv / "bin/python"), "-c", "import tally._core, tally.bench.gpu_check.cli"],
             [str(venv / "bin/tally-bench"), "gpu-check", "--dry-run"]]
    result = {"command": " ".join(shlex.quote(a) for a in install_argv("python3", Path(WHEELS_DIR), Path("."))),
              "venv": str(venv), "status": "passed"}
    with log.open("w") as out:
        for argv in steps:
            out.write("$ " + " ".join(shlex.quote(a) for a in argv) + "\n")
            out.flush()
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tempfile.gettempdir(),
                                  check=False)
            if done.returncode != 0:
                result["status"] = "failed"
                result["note"] = f"`{' '.join(argv[:5])} ...` exited {done.returncode}; see {log}"
                break
    result["wall_s"] = time.monotonic() - begin
    return result
