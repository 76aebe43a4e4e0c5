"""The errors that leave a context unusable (CUDA's sticky errors) are listed twice,
for the server (tally/protocol/errors.py) and for tally's driver
(client_preload/src/connection/context_faults.h): the two lists must agree, and
each must be an error cuda.h itself describes that way (its text, in the client's
generated result-code table)."""
from __future__ import annotations

import re
from pathlib import Path

from tally.protocol import errors

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "client_preload" / "src" / "connection" / "context_faults.h"
RESULT_CODES = ROOT / "client_preload" / "src" / "generated" / "result_codes.cpp"
STICKY_WORDS = ("leaves the process in an inconsistent state", "context cannot be used anymore")


def test_server_and_driver_list_the_same_codes():
    names = re.findall(r"case (CUDA_ERROR_\w+):", HEADER.read_text())
    assert len(names) == len(set(names))
    assert {getattr(errors, name) for name in names} == errors.CONTEXT_FAULT_CODES


def test_each_is_an_error_cuda_h_calls_sticky():
    # each entry: value, name, the driver's short text, cuda.h's documentation (read here)
    string = r'"((?:[^"\\]|\\.)*)"'
    described = {int(code): (name, text) for code, name, _short, text in
                 re.findall(r'\{(\d+), "(CUDA_ERROR_\w+)", ' + string + ", " + string + r"\}",
                            RESULT_CODES.read_text())}
    sticky = {code for code, (_name, text) in described.items() if any(w in text for w in STICKY_WORDS)}
    assert errors.CONTEXT_FAULT_CODES == sticky, {described[c][0] for c in sticky ^ errors.CONTEXT_FAULT_CODES}
