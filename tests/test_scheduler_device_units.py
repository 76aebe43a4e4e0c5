"""The device layer on its own, on the sim backend: what it is handed (a whole
kernel, a slice, a PTB start / resume, a preemption) and the outcomes it hands
back (which units completed together, device time, a stream error, PTB progress),
with no executor around it."""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import A100_SXM4_40GB, KernelCost
from tally.backends.sim.variants import SimVariantProvider
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.scheduler.device_units import DeviceUnits
from tally.scheduler.run_mode import RunMode

BLOCK = (128, 1, 1)


def add_one(mem, params, grid, block, blocks):
    (ptr,) = struct.unpack_from("<Q", params)
    mem.view(ptr + 4 * blocks.start, 4 * len(blocks)).view(np.uint32)[:] += 1


class Rig:
    def __init__(self):
        self.sim = SimBackend(dataclasses.replace(A100_SXM4_40GB, memory_bytes=1 << 20))
        self.sim.define_kernel("add_one", (8,), KernelCost(10.0, 1), add_one)
        module = self.sim.module_load(sim_module_source("add_one"))
        self.fn = self.sim.module_function(module, "add_one")
        self.done = []                      # what the layer reported back, in order
        self.device = DeviceUnits(self.sim, self.sim.clock, on_done=self.done.append)
        self.lane = self.device.open_lane(self.sim.stream_create(0), 0)

    def whole(self, blocks, ptr=0, timed=False):
        return self.device.launch(self.lane, RunMode.WHOLE, self.fn, (blocks, 1, 1), BLOCK, 0,
                                  struct.pack("<Q", ptr), timed=timed)

    def run(self):
        self.sim.run_until(self.sim.now() + 1.0)


def test_whole_kernels_ride_on_the_watched_unit_and_complete_in_launch_order():
    rig = Rig()
    first, second, third = (rig.whole(216) for _ in range(3))
    assert rig.lane.watched is first and list(rig.lane.riders) == [second, third]
    rig.run()
    assert rig.done == [first]               # only the watched unit calls back
    assert rig.device.completed(first, check_stream=True) == [first]
    assert rig.lane.watched is third         # the newest rider still out is watched now
    rig.run()
    assert rig.done == [first, third]
    assert rig.device.completed(third, check_stream=True) == [second, third]
    assert rig.lane.watched is None and not rig.lane.riders
    assert [u.unit_id for u in (first, second, third)] == [1, 2, 3]


def test_a_timed_kernel_is_watched_itself_and_reports_its_device_time():
    rig = Rig()
    untimed = rig.whole(108)
    timed = rig.whole(1080, timed=True)     # 10 waves of 10 us blocks on 108 SMs
    assert rig.lane.watched is timed and not rig.lane.riders
    rig.run()
    assert rig.done == [untimed, timed]
    rig.device.completed(untimed, check_stream=True)
    rig.device.completed(timed, check_stream=True)
    assert untimed.device_seconds is None
    assert timed.device_seconds == pytest.approx(100e-6, rel=0.05)


def test_a_slice_outside_its_grid_reports_the_stream_error_only_when_asked():
    rig = Rig()
    variant = SimVariantProvider().sliced(rig.fn)
    grid = (100, 1, 1)
    for check, want_error in ((True, True), (False, False)):
        params = variant.plan.params(struct.pack("<Q", 0), grid, 90)    # blocks 90..109 of 100
        unit = rig.device.launch(rig.lane, RunMode.SLICE, variant.function, (20, 1, 1), BLOCK, 0, params,
                                 timed=False)
        rig.run()
        assert rig.device.completed(unit, check_stream=check) == [unit]
        assert isinstance(unit.error, DeviceError) if want_error else unit.error is None
        if not want_error:
            with pytest.raises(DeviceError):   # still pending on the stream: not taken by the layer
                rig.sim.stream_query(rig.lane.work)


def test_ptb_launch_preempted_then_resumed_reports_its_progress_and_finishes_the_kernel():
    rig = Rig()
    total = 50_000
    buf = rig.sim.mem_alloc(4 * total)
    variant = SimVariantProvider().ptb(rig.fn)
    grid, params = (total, 1, 1), struct.pack("<Q", buf)

    def ptb_launch(resume):
        state = rig.device.prepare_ptb(rig.lane, resume=resume)
        assert state == rig.lane.ptb_state is not None
        return rig.device.launch(rig.lane, RunMode.PTB, variant.function, (108, 1, 1), BLOCK, 0,
                                 variant.plan.params(params, grid, state), timed=False)

    first = ptb_launch(resume=False)
    rig.sim.run_until(rig.sim.now() + 200e-6)
    rig.device.preempt(first)
    rig.run()
    rig.device.completed(first, check_stream=True)
    assert 0 < first.ptb_tasks_done < total
    second = ptb_launch(resume=True)
    rig.run()
    rig.device.completed(second, check_stream=True)
    # the counter as read back: workers that found no task left count one each (the executor clamps)
    assert second.ptb_tasks_done >= total and second.error is None
    assert np.frombuffer(rig.sim.memory.read(buf, 4 * total), np.uint32).tolist() == [1] * total


def test_no_memory_for_ptb_state_is_answered_not_raised():
    rig = Rig()
    rig.sim.mem_alloc(rig.sim.mem_info()[0])          # the device is full
    assert rig.device.prepare_ptb(rig.lane, resume=False) is None
    assert rig.lane.ptb_state is None


def test_a_launch_the_backend_refuses_raises_and_leaves_nothing_watched():
    rig = Rig()
    with pytest.raises(DeviceError) as refused:
        rig.device.launch(rig.lane, RunMode.WHOLE, rig.fn, (10, 1, 1), BLOCK, 0, b"short", timed=True)
    assert refused.value.code == CUDA_ERROR_INVALID_VALUE
    assert rig.lane.watched is None and not rig.lane.riders
    ok = rig.whole(10)                    # the lane goes on; the failed launch used an id
    assert ok.unit_id == 2 and rig.lane.watched is ok


def test_closing_a_lane_frees_its_ptb_state():
    rig = Rig()
    free = rig.sim.mem_info()[0]
    rig.device.prepare_ptb(rig.lane, resume=False)
    assert rig.sim.mem_info()[0] < free
    rig.sim.stream_synchronize(rig.lane.work)
    rig.device.close_lane(rig.lane, synchronize=True)
    assert rig.sim.mem_info()[0] == free and rig.lane.ptb_state is None
    rig.device.close()

