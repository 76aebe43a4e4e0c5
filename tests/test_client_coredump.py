"""cuCoredump{Get,Set}Attribute{,Global}: settings accepted and read back (tally writes
no GPU core dump; programs such as cuda-bindings' tests set and read them), bad input
CUDA_ERROR_INVALID_VALUE (1)."""
from __future__ import annotations

import re
import socket

from client_helpers import build_c, run_client


def test_settings_read_back():
    run = run_client(build_c("coredump_settings.c"), trace=False)
    assert run.returncode == 0, run.stderr
    assert run.value("set_global") == "0"
    assert run.value("get_global") == "0 1 1"
    assert run.value("get_context") == "0 1"          # inherited from the global setting
    assert run.value("set_file") == "0"
    assert run.value("get_file") == "0 /tmp/tally-core 16"
    assert run.value("get_file_small") == "1"         # the buffer cannot hold the path
    assert run.value("pipe_without_terminator") == "0 0 /tmp/tally-pipe"
    assert run.value("set_long_file") == "1"          # over the driver's 1023 characters
    assert run.value("trigger_host_default") == "0 1"  # the documented defaults
    assert re.fullmatch(rf"0 core\.cuda\.{re.escape(socket.gethostname())}\.\d+", run.value("file_default"))
    assert run.value("set_flags") == "0" and run.value("flags") == "2"
    assert run.value("set_bad_flags") == "1"
    assert run.value("bad_attr") == "1" and run.value("null_value") == "1"
