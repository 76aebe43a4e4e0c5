"""Commands whose libraries come with an optional extra say so, instead of a traceback.

`pip install .` installs what one tally-server and its jobs need; the cluster
tools (tally-plan, placement, Kubernetes) and plots need more (`tally[cluster]`,
`tally[plot]`).
"""
from __future__ import annotations

import importlib.util
import sys

EXTRA_MODULES = {"cluster": ("scipy", "yaml", "grpc", "sklearn", "kubernetes", "joblib"), "plot": ("matplotlib",)}


def missing(extra: str) -> list[str]:
    return [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]


def require(extra: str, command: str) -> None:
    """Exit with status 2 and the install command when `extra`'s libraries are missing."""
    absent = missing(extra)
    if absent:
        print(f"{command} needs tally's `{extra}` extra ({', '.join(absent)} not installed): "
              f"pip install 'tally[{extra}]'", file=sys.stderr)
        raise SystemExit(2)
