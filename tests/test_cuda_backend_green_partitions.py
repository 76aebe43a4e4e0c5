"""The cuda backend's SM caps (tally/backends/green_partitions.py) without a GPU: a
job under tally-run makes a CudaBackend, whose green contexts are then tally's own
(client_preload/src/contexts/green_contexts.h) on an emulator server reporting an
H100's partition rules. A capped kernel records %smid per block: its blocks ran on
at most the granted SMs, in stream order with what came before and after it."""
from __future__ import annotations

import pytest

from e2e_helpers import build_device_code, emulator_server_process, run_job

JOB = r"""
import array, logging, struct, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
from tally.backends.base import ModuleSource
from tally.backends.cuda import CudaBackend, _check
from tally.backends.green_partitions import GreenPartitions

b = CudaBackend(0)
d = b.describe()
print("confines", int(b.traits.confines_sms), "rules", d.sm_count, d.sm_partition_min, d.sm_partition_alignment)
print("grants", *[b.sm_grant(n) for n in (1, 8, 9, 15, 16, 31, 32, 100)])
m = b.module_load(ModuleSource(original=b"", ptx=open(sys.argv[1]).read()))
fn = b.module_function(m, "_Z11record_smidPj")
blocks = 256
out = b.mem_alloc(4 * blocks)
s = b.stream_create(0)

def used(cap, launch=b.launch):
    # 0xFF... first and the copy after, on the same stream: a kernel that ran out of
    # order would leave (or be overwritten by) them.
    b.memset_async(out, 0xFFFFFFFF, 4, blocks, s)
    launch(fn, (blocks, 1, 1), (64, 1, 1), 0, s, struct.pack("<Q", out), sm_cap=cap)
    host = bytearray(4 * blocks)
    b.memcpy_dtoh_async(memoryview(host), out, s)
    b.stream_synchronize(s)
    ids = set(array.array("I", bytes(host)))
    return f"{len(ids)}/{max(ids)}"

print("used", *[used(cap) for cap in (None, 8, 16, 20, 8, None)])

# CUDA 12.4 has no cuGreenCtxStreamCreate: shadow streams are made in the current green context.
dev = _check(__import__("cuda.bindings.driver", fromlist=["x"]).cuDeviceGet(0))
old, why = GreenPartitions.open(dev, "tally emulator", 12040, _check)
def launch_12_4(fn, grid, block, shared, stream, params, sm_cap):
    old.launch(stream, sm_cap, lambda on: b.launch(fn, grid, block, shared, on, params))
print("driver_12_4", used(8, launch_12_4))
old.forget_stream(s)
old.close()
print("refused_old_driver", GreenPartitions.open(dev, "tally emulator", 12030, _check)[1])
print("refused_mig", GreenPartitions.open(dev, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 13000, _check)[1])
b.stream_destroy(s)
b.close()
print("done")
"""

FALLBACK_JOB = r"""
import array, logging, struct, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
from cuda.bindings import driver as cu
# The driver answers as a CUDA 12.3 driver would (tally's own reports 13.0).
cu.cuDriverGetVersion = lambda: (cu.CUresult.CUDA_SUCCESS, 12030)
from tally.backends.base import ModuleSource
from tally.backends.cuda import CudaBackend
b = CudaBackend(0)
print("confines", int(b.traits.confines_sms), "class_confines", int(CudaBackend.traits.confines_sms))
print("grants", *[b.sm_grant(n) for n in (1, 3, 9, 100)])
fn = b.module_function(b.module_load(ModuleSource(original=b"", ptx=open(sys.argv[1]).read())), "_Z11record_smidPj")
out, s = b.mem_alloc(4 * 256), b.stream_create(0)
b.launch(fn, (256, 1, 1), (64, 1, 1), 0, s, struct.pack("<Q", out), sm_cap=8)
host = bytearray(4 * 256)
b.memcpy_dtoh_async(memoryview(host), out, s)
b.stream_synchronize(s)
print("capped_launch_used", len(set(array.array("I", bytes(host)))))
b.close()
"""


@pytest.fixture(scope="module")
def sm32_server():
    server = emulator_server_process("--emulate-sms", "32")
    yield server
    server.stop()


def ran_within(used: str, sms: int) -> bool:
    """`used` is "distinct/highest" %smid of a launch's blocks: on at most `sms` SMs."""
    distinct, highest = map(int, used.split("/"))
    return 1 <= distinct <= sms and highest < sms


def lines(job) -> dict[str, list[str]]:
    return {words[0]: words[1:] for words in map(str.split, job.stdout.splitlines()) if words}


def test_capped_launches_run_in_green_contexts(nvcc, sm32_server, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    ptx = build_device_code(nvcc, "green_contexts.cu", "ptx")
    job = run_job(sm32_server.socket, __import__("sys").executable, script, ptx, priority="high", timeout=300)
    assert job.returncode == 0 and "done" in job.stdout, job.stdout + job.stderr
    out = lines(job)
    assert out["confines"] == ["1", "rules", "32", "8", "8"]
    # Rounded down to multiples of 8, never below 8; the whole device at or above it.
    assert out["grants"] == ["8", "8", "8", "8", "16", "24", "32", "32"]
    # distinct SMs / highest %smid: whole, capped to 8, 16, 20 (granted 16), 8 again, whole.
    # (%smid is the emulator worker that ran the block; how many of the allowed
    # workers get blocks depends on the host's scheduling, never more than allowed.)
    assert all(map(ran_within, out["used"], [32, 8, 16, 16, 8, 32])), out["used"]
    assert ran_within(out["driver_12_4"][0], 8)
    assert " ".join(out["refused_old_driver"]) == "the driver is CUDA 12.3; green contexts need CUDA 12.4"
    assert " ".join(out["refused_mig"]).endswith("1g.5gb is a MIG instance, where CUDA has no green contexts")
    assert "SM shares use green contexts: partitions of at least 8 SMs in multiples of 8, of 32" in job.stderr


def test_without_green_contexts_the_backend_says_so_and_does_not_confine(nvcc, sm32_server, tmp_path):
    script = tmp_path / "fallback.py"
    script.write_text(FALLBACK_JOB)
    ptx = build_device_code(nvcc, "green_contexts.cu", "ptx")
    job = run_job(sm32_server.socket, __import__("sys").executable, script, ptx, priority="high", timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    out = lines(job)
    assert out["confines"] == ["0", "class_confines", "1"] and out["grants"] == ["1", "3", "9", "32"]
    # The cap is not the backend's to keep: the executor's fallback (PTB worker caps) is.
    assert 1 <= int(out["capped_launch_used"][0]) <= 32
    assert job.stderr.count("SM shares cannot use green contexts: the driver is CUDA 12.3") == 1, job.stderr
    assert "Falling back to PTB worker caps plus priority" in job.stderr
