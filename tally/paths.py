"""Where tally's files live: the server socket, the client library, caches.

The client library (C++) applies the same default-socket rule; keep them in step
(client_preload reads TALLY_SERVER first, then this default).
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LIB_DIR = PACKAGE_DIR / "lib"
CLIENT_LIBRARY = LIB_DIR / "libcuda.so.1"

SERVER_ENV = "TALLY_SERVER"


def runtime_dir() -> Path:
    """Per-user directory for sockets: $XDG_RUNTIME_DIR/tally or /tmp/tally-<uid>."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "tally"
    return Path(f"/tmp/tally-{os.getuid()}")


def made_runtime_dir() -> Path:
    """runtime_dir(), made (0700) when no server has made it yet: benchmarks put
    their sockets and work directories there before any server runs."""
    path = runtime_dir()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def default_socket(device: int = 0) -> Path:
    name = "server.sock" if device == 0 else f"server-{device}.sock"
    return runtime_dir() / name


def server_socket(explicit: str | os.PathLike | None = None, device: int = 0) -> Path:
    """The socket a command should use: --socket/--server, else $TALLY_SERVER, else the default."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(SERVER_ENV)
    if env:
        return Path(env)
    return default_socket(device)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tally"
