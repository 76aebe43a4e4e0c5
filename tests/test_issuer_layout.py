"""The C++ data plane knows its devices only through the issuer interface
(csrc/src/data_plane/device_issue.h): each backend's issuer, and its binding,
lives beside that backend (csrc/src/cuda/, csrc/src/emulator/)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_PLANE = ROOT / "csrc" / "src" / "data_plane"
INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)
ISSUERS = {"cuda/data_plane_issuer.h", "emulator/data_plane_issuer.h"}


def test_the_data_plane_includes_no_issuer_of_a_backend():
    for path in sorted(DATA_PLANE.iterdir()):
        included = set(INCLUDE.findall(path.read_text()))
        assert not included & ISSUERS, f"{path.relative_to(ROOT)} includes {sorted(included & ISSUERS)}"


def test_each_issuer_lives_and_is_bound_beside_its_backend():
    for backend, cls in (("cuda", "CudaIssuer"), ("emulator", "EmulatorIssuer")):
        folder = ROOT / "csrc" / "src" / backend
        assert f"class {cls} final : public DeviceIssuer" in (folder / "data_plane_issuer.h").read_text()
        assert f'"{cls}"' in (folder / "issuer_bindings.cpp").read_text()
    for path in DATA_PLANE.iterdir():
        assert "CudaIssuer" not in path.read_text() and "EmulatorIssuer" not in path.read_text(), path.name
