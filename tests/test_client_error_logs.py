"""The driver error log (cuLogs*): tally's own messages to the job also reach the
callbacks an application registers and the dump calls, as the driver documents
them (PyTorch registers a callback when it initializes CUDA)."""
from __future__ import annotations

from client_helpers import build_c, run_client

CUDA_ERROR_INVALID_VALUE = 1
ARRAY_CREATE = "cuMipmappedArrayCreate is not supported by tally (mipmapped, sparse and planar"


def test_messages_reach_callbacks_and_dumps(tmp_path):
    path = tmp_path / "driver.log"
    run = run_client(build_c("error_logs.c"), path, trace=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.value("current") == "0 start=0"
    assert run.value("current_bad_flags") == str(CUDA_ERROR_INVALID_VALUE)
    assert run.value("register") == "0"
    assert run.value("callback_calls") == "1 data_ok=1"
    assert run.value("callback_message").startswith(f"0:{ARRAY_CREATE}")  # CU_LOG_LEVEL_ERROR
    assert run.value("dump") == "0 size_matches=1 advanced=1"
    assert run.value("dump_text").startswith(ARRAY_CREATE)
    assert run.value("dump_again") == "0 size=0"
    assert run.value("unregister") == "0"
    assert run.value("unregister_again") == str(CUDA_ERROR_INVALID_VALUE)
    assert run.value("callback_calls_after") == "1"
    assert run.value("dump_all") == "0 lines=2"
    assert run.value("dump_small") == "0 note=1 newest=1"
    assert run.value("dump_tiny") == f"{CUDA_ERROR_INVALID_VALUE} size=0"
    assert run.value("dump_file") == "0 advanced=2"
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith(ARRAY_CREATE) and "cuGraphicsUnregisterResource" in lines[1]
    # The job's stderr still gets each message once, prefixed.
    assert [line for line in run.stderr.splitlines() if line.startswith("tally: ")][0].startswith(
        f"tally: {ARRAY_CREATE}")
