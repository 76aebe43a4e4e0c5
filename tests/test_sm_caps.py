"""SM caps from the server down: the partition rules (tally/backends/sm_partitions.py),
the executor's cap per launch (a green context's stream, within the job's share) on
the emulator, whose %smid shows which SMs a launch's blocks ran on, and the
green-context requests a job sends (SmResourceQuery, GreenStreamCreate)."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from e2e_helpers import build_device_code
from server_harness import PyClient, ServerProcess

from tally.backends.base import DeviceDescription
from tally.backends.emulator import EmulatorBackend
from tally.backends.ptx_variants import PtxVariantProvider
from tally.backends.sm_partitions import SmPartitionRules, guideline, rules_of
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE
from tally.scheduler import Launch, MemcpyDtoH, StreamExecutor, make_policy
from tally.scheduler.ops import validate_op
from tally.server.client.modules import ModuleRegistry

BLOCKS = 256


def test_cuda_documents_these_partition_rules_per_architecture():
    assert [guideline(cc) for cc in ((7, 5), (8, 0), (8, 9), (9, 0), (12, 0))] == [
        SmPartitionRules(2, 2), SmPartitionRules(4, 2), SmPartitionRules(4, 2), SmPartitionRules(8, 8),
        SmPartitionRules(8, 8)]
    described = DeviceDescription("gpu", bytes(16), 1 << 30, (9, 0), 132)
    assert rules_of(described) == SmPartitionRules(8, 8)
    own = DeviceDescription("gpu", bytes(16), 1 << 30, (9, 0), 132, sm_partition_min=6, sm_partition_alignment=2)
    assert rules_of(own) == SmPartitionRules(6, 2)


def test_a_grant_is_an_upper_bound_rounded_to_the_rules():
    h100, a100 = SmPartitionRules(8, 8), SmPartitionRules(4, 2)
    # 25% of an H100's 132 SMs is 33: 32 SMs; never below the smallest partition.
    assert [h100.grant(n, 132) for n in (1, 8, 33, 66, 131, 132, 500)] == [8, 8, 32, 64, 128, 132, 132]
    assert [a100.grant(n, 108) for n in (1, 5, 27, 107, 108)] == [4, 4, 26, 106, 108]


def test_a_launch_cap_must_be_a_positive_number_of_sms():
    fn = object()
    for bad in (0, -3, "8", 2.5):
        with pytest.raises(ValueError, match="sm_cap must be a positive number of SMs"):
            validate_op(Launch(fn, (1, 1, 1), (1, 1, 1), 0, b"", sm_cap=bad))
    validate_op(Launch(fn, (1, 1, 1), (1, 1, 1), 0, b"", sm_cap=8))


@pytest.fixture(scope="module")
def emulator_32():
    backend = EmulatorBackend(sm_count=32, printf_to_stdout=False)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def record_smid(nvcc, emulator_32):
    ptx = build_device_code(nvcc, "green_contexts.cu", "ptx").read_bytes()
    registry = ModuleRegistry(emulator_32, PtxVariantProvider())
    module = registry.load(ptx)
    return registry.function(module.module_id, "_Z11record_smidPj").backend_function


@pytest.mark.parametrize("share, stream_cap, sms", [
    (None, None, 32),     # whole device
    (None, 8, 8),         # a green context's stream
    (25.0, None, 8),      # the job's share: 25% of 32
    (25.0, 4, 4),         # a green context inside the share
    (12.5, 16, 4),        # a green context larger than the share gets the share
])
def test_the_executor_caps_each_launch(emulator_32, record_smid, share, stream_cap, sms):
    ex = StreamExecutor(emulator_32, make_policy("priority"), PtxVariantProvider())
    try:
        ex.add_client("job", "high", sm_percent=share)
        assert ex.sm_granted("job") == (None if share is None else int(32 * share / 100))
        out = emulator_32.mem_alloc(4 * BLOCKS)
        host = bytearray(4 * BLOCKS)
        ex.submit("job", 1, Launch(record_smid, (BLOCKS, 1, 1), (64, 1, 1), 0, struct.pack("<Q", out),
                                   sm_cap=stream_cap))
        ex.submit("job", 1, MemcpyDtoH(memoryview(host), out, 4 * BLOCKS))
        ex.synchronize_stream("job", 1)
        # %smid is the emulator worker that ran the block: which of the allowed
        # workers get blocks depends on the host's scheduling, never more than allowed.
        used = set(np.frombuffer(host, np.uint32).tolist())
        assert used and used <= set(range(sms))
    finally:
        ex.close()


@pytest.fixture
def null_server(tmp_path):
    server = ServerProcess(tmp_path / "tally.sock", backend="null")
    yield server
    server.stop()


def test_a_job_asks_for_its_sms_and_makes_green_streams(null_server):
    c = PyClient(null_server.socket_path)
    # The null device: 132 SMs, compute capability 9.0 (partitions of 8 in multiples of 8).
    name, fields, _ = c.call("SmResourceQuery")
    assert name == "SmResourceReply"
    assert (fields["sm_count"], fields["min_partition"], fields["alignment"], fields["device_sm_count"]) == (
        132, 8, 8, 132)
    assert c.call("GreenStreamCreate", stream=5, flags=1, priority=0, sm_count=8)[0] == "Done"
    # A green stream without SMs is refused with the reason; the session carries on.
    name, fields, tail = c.call("GreenStreamCreate", stream=6, flags=1, priority=0, sm_count=0)
    assert (name, fields["status"]) == ("Error", CUDA_ERROR_INVALID_VALUE)
    assert "a green context's stream needs at least 1 SM, not 0" in tail.decode()
    name, fields, tail = c.call("GreenStreamCreate", stream=5, flags=1, priority=0, sm_count=8)
    assert name == "Error" and "stream id 5 already exists" in tail.decode()
    assert c.call("Ping", value=3)[1]["value"] == 3
    c.close()
