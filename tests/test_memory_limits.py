"""Memory protection on its own (tally/cluster/memory_limits.py): the flags in
bytes, a best-effort job's quota (the server's default, or less), the memory
reserved for high-priority jobs, what cuMemGetInfo shows each job, and the
operator's quota changes."""
from __future__ import annotations

import threading

import pytest

from tally.cluster.memory_limits import JobMemory, MemoryLimits, MemoryPolicy, QuotaBelowUse
from tally.protocol.errors import CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.scheduler.hooks import AdmissionRequest, Code

MIB, GIB = 1 << 20, 1 << 30
DEVICE = 16 * GIB


def limits(be_quota=None, hp_reserve=None, usable=DEVICE) -> MemoryLimits:
    return MemoryLimits(MemoryPolicy.from_flags(DEVICE, usable, be_quota, hp_reserve))


def request(high: bool, quota: int | None) -> AdmissionRequest:
    return AdmissionRequest(pid=7, program="job", high_priority=high, memory_quota_bytes=quota, sm_percent=None)


def refused(account: JobMemory, nbytes: int) -> str:
    with pytest.raises(DeviceError) as e:
        account.take(nbytes)
    assert e.value.code == CUDA_ERROR_OUT_OF_MEMORY
    return e.value.message


def test_flags_become_bytes_and_sizes_beyond_the_device_are_refused():
    policy = MemoryPolicy.from_flags(DEVICE, DEVICE - 64 * MIB, 25.0, 4 * GIB)
    assert (policy.be_quota_bytes, policy.hp_reserve_bytes) == (4 * GIB, 4 * GIB)
    assert policy.best_effort_pool == 12 * GIB - 64 * MIB     # of what was free at start
    with pytest.raises(ValueError, match=r"--hp-memory-reserve 17.00 GiB is more than the device has \(16.00 GiB\)"):
        MemoryPolicy.from_flags(DEVICE, DEVICE, None, 17 * GIB)
    with pytest.raises(ValueError, match="--be-memory-quota"):
        MemoryPolicy.from_flags(DEVICE, DEVICE, DEVICE + 1, None)
    assert MemoryPolicy.from_flags(DEVICE, DEVICE, None, None).best_effort_pool == DEVICE


def test_a_best_effort_job_gets_the_servers_quota_or_less_never_more():
    lim = limits(be_quota=GIB)
    assert lim.account(high_priority=False, asked=None).quota_bytes == GIB
    assert lim.account(high_priority=False, asked=256 * MIB).quota_bytes == 256 * MIB
    assert lim.admit(request(high=False, quota=GIB)).allowed
    status = lim.admit(request(high=False, quota=2 * GIB))
    assert status.code is Code.DENY
    assert status.reason == ("memory quota 2.00 GiB is more than this server gives best-effort jobs (1.00 GiB, "
                             "tally-server --be-memory-quota); ask for at most that, or for no quota")
    # The server's default is for best-effort jobs: a high-priority one keeps its own (or none).
    assert lim.admit(request(high=True, quota=2 * GIB)).allowed
    assert lim.account(high_priority=True, asked=None).quota_bytes is None


def test_the_quota_refuses_with_what_it_is_and_what_is_in_use():
    job = limits().account(high_priority=False, asked=100 * MIB)
    job.take(48 * MIB)
    assert refused(job, 64 * MIB) == ("allocation of 64.00 MiB (67108864 bytes) refused: this job's memory quota "
                                      "is 100.00 MiB, 48.00 MiB in use")
    job.take(52 * MIB)
    assert job.used_bytes == 100 * MIB


def test_best_effort_jobs_together_never_take_the_reserve():
    lim = limits(hp_reserve=15 * GIB)                   # best-effort jobs share 1 GiB
    a, b = (lim.account(high_priority=False, asked=None) for _ in range(2))
    a.take(768 * MIB)
    b.take(200 * MIB)
    assert refused(b, 100 * MIB) == (
        "allocation of 100.00 MiB (104857600 bytes) refused: the memory reserved for high-priority jobs (15.00 GiB) "
        "leaves best-effort jobs 56.00 MiB (they hold 968.00 MiB of 1.00 GiB)")
    assert lim.best_effort_used == 968 * MIB and b.used_bytes == 200 * MIB    # the refusal counted nothing
    # The reserve holds with no high-priority job attached; a high-priority job may use it.
    hp = lim.account(high_priority=True, asked=None)
    hp.take(15 * GIB)
    a.give(768 * MIB)
    b.take(800 * MIB)                                    # what a gave back is best-effort memory again
    assert lim.best_effort_used == 1000 * MIB


def test_cumemgetinfo_shows_each_job_its_own_view():
    lim = limits(hp_reserve=12 * GIB, be_quota=6 * GIB)
    be = lim.account(high_priority=False, asked=None)
    other = lim.account(high_priority=False, asked=512 * MIB)
    other.take(512 * MIB)
    be.take(GIB)
    # the reserve leaves best-effort jobs 4 GiB of which they hold 1.5: less than be's quota
    assert be.view(device_free=DEVICE - 1536 * MIB, device_total=DEVICE) == (2560 * MIB, 4 * GIB)
    assert other.view(DEVICE - 1536 * MIB, DEVICE) == (0, 512 * MIB)
    hp = lim.account(high_priority=True, asked=None)
    assert hp.view(DEVICE - 1536 * MIB, DEVICE) == (DEVICE - 1536 * MIB, DEVICE)
    # the device's own free memory narrows everyone's view
    assert be.view(device_free=100 * MIB, device_total=DEVICE) == (100 * MIB, 4 * GIB)


def test_the_operator_quota_applies_to_future_allocations_never_below_use():
    job = limits().account(high_priority=False, asked=None)
    job.take(300 * MIB)
    with pytest.raises(QuotaBelowUse, match="the job holds 300.00 MiB already, more than 200.00 MiB"):
        job.set_quota(200 * MIB)
    assert job.quota_bytes is None
    assert job.set_quota(400 * MIB) is None
    assert "quota is 400.00 MiB, 300.00 MiB in use" in refused(job, 101 * MIB)
    assert job.set_quota(GIB) == 400 * MIB
    job.take(101 * MIB)


def test_concurrent_allocations_never_overshoot_the_best_effort_memory():
    lim = limits(hp_reserve=DEVICE - 1000)               # best-effort jobs share 1000 bytes
    jobs = [lim.account(high_priority=False, asked=None) for _ in range(8)]
    granted = [0] * len(jobs)

    def allocate(i: int) -> None:
        for _ in range(500):
            try:
                jobs[i].take(1)
                granted[i] += 1
            except DeviceError:
                pass

    threads = [threading.Thread(target=allocate, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 1000 and lim.best_effort_used == 1000
