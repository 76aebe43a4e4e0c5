"""Entry points tally does not implement: CUDA_ERROR_NOT_SUPPORTED, and one line on
stderr per function however often and from however many threads it is called."""
from __future__ import annotations

import sys
from pathlib import Path

from client_helpers import build_c, run_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from unsupported_reasons import RULES  # noqa: E402


def reason(name: str) -> str:
    return next(rule.reason for rule in RULES if rule.matches(name))

CUDA_ERROR_NOT_SUPPORTED = 801


def test_unsupported_entry_logs_once_and_returns_not_supported():
    run = run_client(build_c("unsupported.c"), trace=False)
    assert run.returncode == 0, run.stderr
    assert run.value("results") == "800 not_supported=800 other=1"
    lines = [line for line in run.stderr.splitlines() if line.startswith("tally: ")]
    assert lines == [
        f"tally: cuMipmappedArrayCreate is not supported by tally ({reason('cuMipmappedArrayCreate')}); it returns "
        "CUDA_ERROR_NOT_SUPPORTED (reported once per function)",
        f"tally: cuGraphicsUnregisterResource is not supported by tally ({reason('cuGraphicsUnregisterResource')}); "
        "it returns CUDA_ERROR_NOT_SUPPORTED (reported once per function)",
    ]
