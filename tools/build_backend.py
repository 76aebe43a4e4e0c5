"""The build backend: setuptools' own, asking for the `cmake` package only when no
usable CMake is on the PATH already.

pip builds in a fresh environment with whatever the project lists as build
requirements; listing `cmake` unconditionally downloads and unpacks a 30 MB wheel
on every install even on machines that have CMake (every machine with a CUDA
toolkit and a compiler usually does).
"""
from __future__ import annotations

import re
import shutil
import subprocess

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the rest of the PEP 517 hooks, unchanged)

MINIMUM_CMAKE = (3, 18)


def _needs_cmake_package() -> bool:
    cmake = shutil.which("cmake")
    if cmake is None:
        return True
    try:
        out = subprocess.run([cmake, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return True
    m = re.search(r"(\d+)\.(\d+)", out)
    return m is None or (int(m.group(1)), int(m.group(2))) < MINIMUM_CMAKE


def _with_cmake(requires: list[str]) -> list[str]:
    return [*requires, "cmake>=3.18"] if _needs_cmake_package() else requires


def get_requires_for_build_wheel(config_settings=None):
    return _with_cmake(_setuptools.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(config_settings=None):
    return _with_cmake(_setuptools.get_requires_for_build_editable(config_settings))
