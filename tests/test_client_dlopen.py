"""The dlopen hook: a job that opens the real driver by absolute path gets tally's
library (when tally-run LD_PRELOADs it); every other dlopen is untouched."""
from __future__ import annotations

import pytest

from client_helpers import build_c, run_client

DRIVER_PATHS = ["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so", "libcuda.so",
                "/opt/nvidia/libcuda.so.580.65.06"]


@pytest.mark.parametrize("path", DRIVER_PATHS)
def test_opening_the_real_driver_lands_on_tally(path):
    run = run_client(build_c("dlopen_driver.c"), path)
    assert run.returncode == 0, run.stderr
    assert run.value("driver_handle") == "set"
    assert run.value("get_version_rc") == "0 version=13000"
    assert run.value("tally").startswith("tally-client")
    assert run.value("libm_cos0") == "1"
    assert run.value("missing") == "null"


def test_other_names_are_not_taken_for_the_driver():
    run = run_client(build_c("dlopen_driver.c"), "/nonexistent/libcudart.so.13")
    assert run.value("driver_handle") != "set"
    run = run_client(build_c("dlopen_driver.c"), "/nonexistent/libcuda.so.1x")
    assert run.value("driver_handle") != "set"
