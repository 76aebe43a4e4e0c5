"""The C++ data plane inside tally: the executor's fast lanes (granted exactly
where the executor would issue at once; a busy high-priority lane holds
best-effort work back as the executor's own units do; a preemptible unit
revokes them), and jobs on real servers with either plane: the same results, in
the job's order, and the same errors at the next synchronization."""
from __future__ import annotations

import itertools
import os
import struct
import threading
import time
from types import SimpleNamespace

import pytest
from e2e_helpers import Server, build_device_code
from ptx_corpus import CORPUS_DIR, compile_ptx
from server_harness import PyClient

from tally import _core, protocol
from tally.backends.base import DataPlaneDevice
from tally.backends.emulator import EmulatorBackend
from tally.backends.null import NullBackend
from tally.backends.ptx_variants import PtxVariantProvider
from tally.protocol.spec import DEST_ARENA, SOURCE_INLINE
from tally.scheduler import Launch, Memset, StreamExecutor, make_policy
from tally.scheduler.hooks import ALLOW, Hooks
from tally.scheduler.profiler import TransparentProfiler
from tally.scheduler.run_mode import PTB
from tally.server.client.modules import ModuleRegistry

_names = itertools.count()
LEGACY = 0
INVALID_VALUE = 1
ILLEGAL_ADDRESS = 700


def segment_pair():
    name = f"/tally-dps-{os.getpid()}-{next(_names)}"
    server = _core.Segment.create(name, 1 << 16, 1 << 16, 1 << 16, 1 << 16)
    client = _core.Segment.open(name)
    server.unlink()          # both ends are mapped: the name would only outlive the test
    return server, client


def attached_plane(ex, backend, client_id, device=None):
    """A ClientPlane for `client_id`, attached to the executor as the server attaches a job's."""
    server, client = segment_pair()
    real = backend.data_plane()
    device = device or real            # `device`: what the executor is told of the backend's issuer
    plane = _core.data_plane.ClientPlane(server, real.issuer)
    ex.attach_fast_lanes(client_id, plane, device)
    return plane, device, server, client


def kernel(backend, source, name, variants=None):
    registry = ModuleRegistry(backend, variants)
    module = registry.load(compile_ptx(CORPUS_DIR / source, arch="sm_90").encode())
    return registry.function(module.module_id, name)


def granted(ex) -> dict:
    return {(client, key): on for client, key, on, _ in ex.fast_lanes.lanes()}


def caps(ex) -> dict:
    return {(client, key): cap for client, key, on, cap in ex.fast_lanes.lanes() if on}


def one_launch_each(ex, clients, launch, device=None):
    """Each client ran one kernel and synchronized; then the executor offers its lane."""
    for client, priority, share in clients:
        ex.add_client(client, priority, sm_percent=share)
        attached_plane(ex, ex.backend, client, device)
        ex.submit(client, LEGACY, launch)
        ex.synchronize_stream(client, LEGACY)
    for client, _, _ in clients:
        ex.offer_fast_lane(client, LEGACY)
    return {c: granted(ex).get((c, LEGACY), False) for c, _, _ in clients}


@pytest.mark.parametrize("policy, options, expected", [
    ("priority", {"idle_grace_ms": 0}, {"hp": True, "be": True, "share": True}),     # the high-priority job is idle
    ("priority", {"idle_grace_ms": 60_000}, {"hp": True, "be": False, "share": True}),   # not idle long enough
    ("fifo", {}, {"hp": True, "be": True, "share": True}),
    ("kernel-priority", {}, {"hp": True, "be": True, "share": True}),
    ("time-slice", {}, {"hp": False, "be": False, "share": False}),
])
def test_lanes_are_granted_where_the_executor_issues_at_once(policy, options, expected):
    backend = NullBackend()
    fn = kernel(backend, "vector_add.cu", "vector_add").backend_function
    ex = StreamExecutor(backend, make_policy(policy, **options))
    # the best-effort job first: it must not wait out the grace after the others' kernels
    clients = (("be", "best-effort", None), ("hp", "high", None), ("share", "high", 50))
    assert one_launch_each(ex, clients, Launch(fn, (4, 1, 1), (128, 1, 1), 0, bytes(28))) == expected
    if expected["share"]:                     # the share's launches carry its cap; the others none
        assert caps(ex)[("share", LEGACY)] == ex.sm_granted("share") < backend.describe().sm_count
        assert caps(ex)[("hp", LEGACY)] is None
    ex.release_stream("hp", LEGACY)           # a released stream has no lane
    assert ("hp", LEGACY) not in granted(ex)
    ex.close()


def test_best_effort_release_closes_at_high_priority_work_and_goes_to_one_job_at_a_time():
    backend = NullBackend()
    fn = kernel(backend, "vector_add.cu", "vector_add").backend_function
    launch = Launch(fn, (4, 1, 1), (128, 1, 1), 0, bytes(28))
    ex = StreamExecutor(backend, make_policy("priority", idle_grace_ms=0))
    gate = ex.fast_lanes.gate
    assert one_launch_each(ex, (("hp", "high", None), ("be1", "best-effort", None)), launch) == {"hp": True,
                                                                                                  "be1": True}
    assert gate.is_open
    assert ex.runs_whole("be1", launch) and not ex.runs_whole("hp", launch)   # a 4-block kernel runs whole
    ex.submit("hp", LEGACY, launch)                 # high-priority work closes the gate at once
    assert not gate.is_open and granted(ex)[("be1", LEGACY)]    # (the lane stays: the gate stops its kernels)
    ex.synchronize_stream("hp", LEGACY)
    ex.add_client("be2")
    attached_plane(ex, backend, "be2")
    ex.offer_fast_lane("be1", LEGACY)
    assert gate.is_open
    ex.submit("be2", LEGACY, launch)                # another job's kernel waits for the policy:
    assert not granted(ex)[("be1", LEGACY)]         # be1 no longer issues past it
    ex.synchronize_stream("be2", LEGACY)
    ex.offer_fast_lane("be2", LEGACY)
    assert granted(ex)[("be2", LEGACY)] and not granted(ex)[("be1", LEGACY)]
    ex.close()


def test_pause_and_a_new_share_revoke_the_lanes_and_a_gate_keeps_best_effort_work_in_python():
    backend = NullBackend()
    fn = kernel(backend, "vector_add.cu", "vector_add").backend_function
    launch = Launch(fn, (4, 1, 1), (128, 1, 1), 0, bytes(28))
    ex = StreamExecutor(backend, make_policy("fifo"))
    assert one_launch_each(ex, (("hp", "high", None), ("be", "best-effort", None)), launch) == {"hp": True,
                                                                                               "be": True}
    ex.pause_client("hp")
    assert not granted(ex)[("hp", LEGACY)]
    ex.offer_fast_lane("hp", LEGACY)
    assert not granted(ex)[("hp", LEGACY)]          # not while it is paused
    ex.resume_client("hp")
    ex.offer_fast_lane("hp", LEGACY)
    assert caps(ex)[("hp", LEGACY)] is None
    granted_sms = ex.set_sm_percent("hp", 25)
    assert not granted(ex)[("hp", LEGACY)]          # offered again, with the new cap
    ex.offer_fast_lane("hp", LEGACY, stream_sm_cap=granted_sms + 5)     # a green context's stream: the lesser
    assert caps(ex)[("hp", LEGACY)] == granted_sms
    ex.offer_fast_lane("hp", LEGACY, stream_sm_cap=1)
    assert caps(ex)[("hp", LEGACY)] == 1
    ex.close()

    class Hold:                                     # a cluster gate (tally/scheduler/hooks.py)
        def gate(self, unit, now):
            return ALLOW

    hooks = Hooks()
    hooks.register(Hold())
    ex = StreamExecutor(backend, make_policy("fifo"), hooks=hooks)
    # Every best-effort unit asks the gate in Python; high-priority work is never gated.
    assert one_launch_each(ex, (("hp", "high", None), ("be", "best-effort", None)), launch) == {"hp": True,
                                                                                               "be": False}
    ex.close()


def test_an_issuer_that_cannot_confine_launches_gets_no_capped_lane():
    backend = NullBackend()
    fn = kernel(backend, "vector_add.cu", "vector_add").backend_function
    real = backend.data_plane()
    # the cuda issuer's answer (its capped launches need the Python backend's green partitions)
    uncapped = DataPlaneDevice(SimpleNamespace(completes_at_issue=True, carries_sm_cap=False),
                               real.stream_handle, real.register_function)
    ex = StreamExecutor(backend, make_policy("priority"))
    clients = (("hp", "high", None), ("share", "high", 50))
    assert one_launch_each(ex, clients, Launch(fn, (4, 1, 1), (128, 1, 1), 0, bytes(28)), uncapped) == {
        "hp": True, "share": False}
    ex.close()


def test_a_lanes_launches_run_on_the_jobs_share_of_the_emulators_sms():
    backend = EmulatorBackend(printf_to_stdout=False)
    ex = StreamExecutor(backend, make_policy("priority"))
    try:
        ex.add_client("hp", "high", sm_percent=25)        # 2 of the emulator's 8 SMs
        plane, device, server, client = attached_plane(ex, backend, "hp")
        registry = ModuleRegistry(backend)
        module = registry.load(compile_ptx(CORPUS_DIR / "vector_add.cu", arch="sm_90").encode())
        add = registry.function(module.module_id, "vector_add")
        assert device.register_function(plane, add.function_id, add.backend_function, add.param_bytes)
        n = 64 * 128
        a = backend.mem_alloc(4 * n)
        params = struct.pack("<QQQi", a, a, a, n)
        ex.submit("hp", LEGACY, Launch(add.backend_function, (64, 1, 1), (128, 1, 1), 0, params))
        ex.synchronize_stream("hp", LEGACY)
        ex.offer_fast_lane("hp", LEGACY)
        plane.stream_rules(LEGACY, True, True)
        assert caps(ex)[("hp", LEGACY)] == 2
        stream = ex._clients["hp"].streams[LEGACY].backend_stream
        backend.sm_usage.pop(stream, None)
        loop = threading.Thread(target=plane.serve, args=(lambda *request: pytest.fail(f"{request}"), 0.05),
                                daemon=True)
        loop.start()
        client.request_ring.push(protocol.codec("LaunchKernel").kind, 0, protocol.codec("LaunchKernel").pack(
            params, function=add.function_id, stream=LEGACY, grid=(64, 1, 1), block=(128, 1, 1)))
        deadline = time.monotonic() + 30
        while plane.lane_counts(LEGACY)[0] == 0 or not plane.lane_quiet(LEGACY):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        sms_used, _ = backend.sm_usage[stream]
        assert 1 <= sms_used <= 2
        plane.stop()
        loop.join(5)
    finally:
        ex.close()
        backend.close()


def test_a_high_priority_plane_preempts_a_ptb_unit_itself_and_keeps_its_lane():
    # The emulator, because a PTB kernel ends only once its workers really ran every task.
    # A preemptible unit used to revoke every lane, so each high-priority kernel meanwhile
    # went through Python (policy, preemption, launch: 30-50 us on a GPU's host). Now the
    # high-priority lane stays granted and its plane sets the unit's flag before its kernel.
    backend = EmulatorBackend(printf_to_stdout=False)
    variants = PtxVariantProvider()
    saxpy = kernel(backend, "saxpy.cu", "saxpy", variants).backend_function
    ex = StreamExecutor(backend, make_policy("priority", idle_grace_ms=0), variants,
                        TransparentProfiler(backend.describe().sm_count), be_transform="ptb")
    plane, device, server, client = attached_plane(ex, backend, "hp")
    python = []
    loop = threading.Thread(target=plane.serve, args=(lambda *request: python.append(request), 0.05), daemon=True)
    try:
        ex.add_client("hp", "high")
        ex.add_client("be")
        ptb_outcomes = []                  # what each launch of the PTB unit did, in order
        complete = ex._kernels.complete

        def completed(unit, now):
            if unit.mode is PTB:
                ptb_outcomes.append(unit.device)
            complete(unit, now)
        ex._kernels.complete = completed
        add = kernel(backend, "vector_add.cu", "vector_add")
        assert device.register_function(plane, add.function_id, add.backend_function, add.param_bytes)
        hp_out = backend.mem_alloc(4 * 128)
        hp_params = struct.pack("<QQQi", hp_out, hp_out, hp_out, 128)
        ex.submit("hp", LEGACY, Launch(add.backend_function, (1, 1, 1), (128, 1, 1), 0, hp_params))
        ex.synchronize_stream("hp", LEGACY)
        ex.offer_fast_lane("hp", LEGACY)
        plane.stream_rules(LEGACY, True, True)
        assert granted(ex) == {("hp", LEGACY): True}
        loop.start()
        n = 1 << 17
        x, y = backend.mem_alloc(4 * n), backend.mem_alloc(4 * n)
        side = backend.stream_create()
        backend.memcpy_htod_async(x, memoryview(struct.pack(f"<{n}f", *range(n))), side)
        backend.stream_synchronize(side)
        ex.submit("be", LEGACY, Launch(saxpy, (n // 128, 1, 1), (128, 1, 1), 0, struct.pack("<ifQQ", n, 2.0, x, y)))
        assert ex.counters()["units_in_flight"] == 1 and ex.counters()["kernels_ptb"] == 1
        assert granted(ex) == {("hp", LEGACY): True}       # the PTB unit left the high-priority lane alone
        client.request_ring.push(protocol.codec("LaunchKernel").kind, 0, protocol.codec("LaunchKernel").pack(
            hp_params, function=add.function_id, stream=LEGACY, grid=(1, 1, 1), block=(128, 1, 1)))
        deadline = time.monotonic() + 30
        while ex.fast_lanes.gate.preemptions_fired == 0:
            assert time.monotonic() < deadline and not python, python
            time.sleep(0.001)
        ex.synchronize_stream("be", LEGACY)
        counters = ex.counters()
        assert counters["preemptions"] == 1 and counters["preemptions_by_planes"] == 1, counters
        # Stopped with tasks left, then launched again for them. (On a loaded machine the
        # workers may take the last task before the flag reaches them: then the one launch
        # ran the whole kernel and there is nothing to resume.)
        first = ptb_outcomes[0]
        assert first.preempted_by_plane, first
        if first.ptb_tasks_done < n // 128:
            assert counters["ptb_launches"] >= 2 and len(ptb_outcomes) >= 2, counters
        assert counters["clients"]["be"]["kernels_completed"] == 1 and not python
        result = bytearray(4 * n)
        backend.memcpy_dtoh_async(memoryview(result), y, side)
        backend.stream_synchronize(side)
        assert struct.unpack(f"<{n}f", result)[-3:] == (2.0 * (n - 3), 2.0 * (n - 2), 2.0 * (n - 1))   # every task ran
        assert not ex.fast_lanes._pinned                     # nothing left pinned
    finally:
        plane.stop()
        if loop.is_alive():
            loop.join(5)
        ex.close()
        backend.close()


@pytest.fixture(scope="module")
def spin_ptx(nvcc) -> bytes:
    return build_device_code(nvcc, "busy_loop.cu", "ptx").read_bytes()


def test_a_busy_high_priority_lane_holds_best_effort_work_back(spin_ptx):
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=120)
    ex = StreamExecutor(backend, make_policy("priority", idle_grace_ms=0))
    ex.add_client("hp", "high")
    ex.add_client("be")
    plane, device, server, client = attached_plane(ex, backend, "hp")
    registry = ModuleRegistry(backend)
    spin = registry.function(registry.load(spin_ptx).module_id, "_Z4spinPjj")
    assert device.register_function(plane, spin.function_id, spin.backend_function, spin.param_bytes)
    out = backend.mem_alloc(4096)
    ex.submit("hp", LEGACY, Memset(out, 0, 4, 32))    # the executor's stream, and its lane
    ex.offer_fast_lane("hp", LEGACY)
    plane.stream_rules(LEGACY, True, True)
    python = []
    loop = threading.Thread(target=plane.serve, args=(lambda *request: python.append(request), 0.05), daemon=True)
    loop.start()
    try:
        params = struct.pack("<QI", out, 3_000_000)
        client.request_ring.push(protocol.codec("LaunchKernel").kind, 0, protocol.codec("LaunchKernel").pack(
            params, function=spin.function_id, stream=LEGACY, grid=(1, 1, 1), block=(32, 1, 1)))
        deadline = time.monotonic() + 10
        while plane.lane_counts(LEGACY)[0] == 0:
            assert time.monotonic() < deadline and not python, python
            time.sleep(0.001)
        vector_add = kernel(backend, "vector_add.cu", "vector_add").backend_function
        be_out = backend.mem_alloc(4096)
        ex.submit("be", LEGACY, Launch(vector_add, (1, 1, 1), (32, 1, 1), 0, struct.pack("<QQQi", be_out, be_out,
                                                                                          be_out, 32)))
        busy_checks = 0
        while not plane.lane_quiet(LEGACY):
            assert ex.counters()["clients"]["be"]["kernels"] == 0, "best-effort work started next to the lane's"
            busy_checks += 1
            time.sleep(0.005)
        assert busy_checks > 3, "the high-priority kernel ended too soon to show anything"
        ex.synchronize_stream("be", LEGACY)          # and once the lane is quiet, it runs
        assert ex.counters()["clients"]["be"]["kernels_completed"] == 1
        assert ex.counters()["clients"]["hp"]["kernels"] == 1 and not python
    finally:
        plane.stop()
        loop.join(5)
        ex.close()
        backend.close()
        client.close()
        server.unlink()


class BestEffortPlane:
    """A best-effort job's plane on the emulator with its lane granted (no high-priority
    work: the gate is open), serving on a thread; the spin kernel registered."""

    def __init__(self, spin_ptx):
        self.backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=120)
        self.ex = StreamExecutor(self.backend, make_policy("priority", idle_grace_ms=0))
        self.ex.add_client("be")
        self.plane, device, self.server, self.client = attached_plane(self.ex, self.backend, "be")
        registry = ModuleRegistry(self.backend)
        self.spin = registry.function(registry.load(spin_ptx).module_id, "_Z4spinPjj")
        assert device.register_function(self.plane, self.spin.function_id, self.spin.backend_function,
                                        self.spin.param_bytes)
        self.out = self.backend.mem_alloc(4096)
        self.ex.submit("be", LEGACY, Memset(self.out, 0, 4, 32))
        self.ex.synchronize_stream("be", LEGACY)
        self.ex.offer_fast_lane("be", LEGACY)
        assert granted(self.ex)[("be", LEGACY)] and self.ex.fast_lanes.gate.is_open
        self.plane.stream_rules(LEGACY, True, True)
        self.plane.add_whole_shape(self.spin.function_id, (1, 1, 1), (32, 1, 1), 0)
        self.python = []
        self.loop = threading.Thread(target=self.plane.serve,
                                     args=(lambda *request: self.python.append(request), 0.05), daemon=True)
        self.loop.start()

    def rule(self, max_batch: int, budget_ns: int, timed_every: int = 0, drain_wait_ns: int = 1_000_000) -> None:
        self.plane.set_lane_rule(self.ex.fast_lanes.gate, False, True, True, max_batch, budget_ns, timed_every,
                                 drain_wait_ns)

    def launch(self, iterations: int, count: int) -> None:
        for _ in range(count):
            self.client.request_ring.push(protocol.codec("LaunchKernel").kind, 0, protocol.codec("LaunchKernel").pack(
                struct.pack("<QI", self.out, iterations), function=self.spin.function_id, stream=LEGACY,
                grid=(1, 1, 1), block=(32, 1, 1)))

    def handled(self) -> int:
        """Launches the plane issued plus those it handed to Python."""
        return self.plane.lane_counts(LEGACY)[0] + len(self.python)

    def close(self) -> None:
        self.plane.stop()
        self.loop.join(5)
        self.ex.close()
        self.backend.close()
        self.client.close()
        self.server.unlink()


LONG_SPIN = 10_000_000    # a tenth of a second or more on the emulator: far over the plane's 1 ms wait


@pytest.mark.parametrize("max_batch, budget_ns, expected_ns, on_device", [
    (3, 10**9, 1000, 3),         # as many as the policy's batch holds
    (32, 2500, 1000, 2),         # as many as fit the budget
    (32, 10**9, None, 0),        # a kernel Python has yet to time goes to Python, to be timed there
    (1, 10**9, 1000, 1),         # one unit at a time
])
def test_a_best_effort_plane_batches_kernels_of_known_time_within_its_rule(spin_ptx, max_batch, budget_ns,
                                                                            expected_ns, on_device):
    be = BestEffortPlane(spin_ptx)
    try:
        be.rule(max_batch, budget_ns)
        if expected_ns is not None:
            be.plane.set_whole_time(be.spin.function_id, (1, 1, 1), (32, 1, 1), 0, expected_ns)
        be.launch(LONG_SPIN, 5)
        deadline = time.monotonic() + 30
        while be.handled() < 5:      # a launch with no room waits up to 1 ms for a drain, then goes to Python
            assert time.monotonic() < deadline, (be.plane.lane_counts(LEGACY), be.python)
            time.sleep(0.001)
        assert be.plane.lane_counts(LEGACY)[0] == on_device and len(be.python) == 5 - on_device
        assert be.plane.batched() == max(0, on_device - 1)     # issued while the first still ran
    finally:
        be.close()


def test_a_full_batch_waits_for_its_kernels_to_drain_instead_of_going_to_python(spin_ptx):
    be = BestEffortPlane(spin_ptx)
    try:
        be.rule(2, 10**9, drain_wait_ns=30 * 10**9)     # (a loaded machine's emulator may take a while)
        be.plane.set_whole_time(be.spin.function_id, (1, 1, 1), (32, 1, 1), 0, 1000)
        be.launch(1000, 12)
        deadline = time.monotonic() + 30
        while be.handled() < 12:
            assert time.monotonic() < deadline, (be.plane.lane_counts(LEGACY), be.python)
            time.sleep(0.001)
        assert be.python == [] and be.plane.lane_counts(LEGACY)[0] == 12
        assert be.plane.batched() == 6      # the second of each pair joined the first
    finally:
        be.close()


def test_every_so_many_launches_of_a_shape_one_goes_to_python_to_be_timed(spin_ptx):
    be = BestEffortPlane(spin_ptx)
    try:
        be.rule(32, 10**9, timed_every=4)
        be.plane.set_whole_time(be.spin.function_id, (1, 1, 1), (32, 1, 1), 0, 1000)
        be.launch(1000, 10)
        deadline = time.monotonic() + 30
        while be.handled() < 10:
            assert time.monotonic() < deadline, (be.plane.lane_counts(LEGACY), be.python)
            time.sleep(0.001)
        # the plane's 4 launches, the 5th to Python (once the streams were quiet), 4 more, the 10th
        assert be.plane.lane_counts(LEGACY)[0] == 8 and len(be.python) == 2
    finally:
        be.close()


# ---- real servers, either plane -----------------------------------------------------

@pytest.fixture(scope="module", params=["cpp", "python"])
def plane_server(request):
    server = Server("emulator", ("--data-plane", request.param))
    yield request.param, server
    server.stop()


@pytest.fixture(scope="module")
def iota_ptx(nvcc) -> bytes:
    return build_device_code(nvcc, "driver_kernels.cu", "ptx").read_bytes()


class Job(PyClient):
    def __init__(self, server, ptx: bytes):
        super().__init__(server.socket, priority=protocol.Priority.HIGH)
        kind, values, _ = self.call("ModuleLoad", ptx, size=len(ptx))
        assert kind == "ModuleLoadReply", values
        kind, values, _ = self.call("GetFunction", b"iota", module=values["module"])
        self.iota = values["function"]
        self.out = self.call("MemAlloc", bytes=4096)[1]["dptr"]

    def launch_iota(self, start: int, stream=LEGACY, n=1024, params=None):
        self.send("LaunchKernel", params or struct.pack("<Qii", self.out, n, start), function=self.iota,
                  stream=stream, grid=(n // 128, 1, 1), block=(128, 1, 1))

    def first_ints(self, count: int, stream=LEGACY) -> list[int]:
        kind, values, _ = self.call("MemcpyDtoH", src=self.out, width=4 * count, height=1, src_pitch=4 * count,
                                    stream=stream, dest=DEST_ARENA)
        assert kind == "MemcpyDtoHReply", values
        data = self.segment.download.read(values["arena_offset"], values["size"])
        self.segment.download.release(values["arena_offset"], values["size"])
        return list(struct.unpack(f"<{count}i", data))


def test_requests_take_effect_in_the_jobs_order_with_either_plane(plane_server, iota_ptx):
    plane, server = plane_server
    job = Job(server, iota_ptx)
    try:
        job.launch_iota(100)                              # through Python: the kernel becomes known
        assert job.first_ints(3) == [100, 101, 102]
        for start in range(200, 260):                     # then straight to the device (cpp)
            job.launch_iota(start)
        job.send("Memset", dst=job.out + 4, value=7, element_size=4, width=1, height=1, pitch=4, stream=LEGACY)
        assert job.first_ints(3) == [259, 7, 261]
        job.send("MemcpyHtoD", struct.pack("<i", -5), dst=job.out, width=4, height=1, dst_pitch=4, stream=LEGACY,
                 source=SOURCE_INLINE)
        job.launch_iota(1000, n=128)
        created = job.call("StreamCreate", stream=9, flags=0)
        assert created[0] == "Done", created   # blocking: after the legacy launch
        job.launch_iota(2000, stream=9, n=128)
        assert job.call("StreamSynchronize", stream=9)[0] == "Done"
        assert job.call("CtxSynchronize")[0] == "Done"
        assert job.first_ints(2) == [2000, 2001]
        status = server.status()
        mine = [c for c in status["clients"] if c["client_id"] == job.reply["client_id"]][0]
        assert mine["requests_by_kind"]["LaunchKernel"] == 63 and status["server"]["data_plane"] == plane
        if plane == "cpp":      # all but the first launch (and the memset, the copy) skipped Python
            assert mine["requests_in_cpp"] >= 62, mine
        else:
            assert mine["requests_in_cpp"] == 0
    finally:
        job.close()


def test_a_bad_launch_fails_at_the_next_synchronization_with_either_plane(plane_server, iota_ptx):
    plane, server = plane_server
    job = Job(server, iota_ptx)
    try:
        job.launch_iota(1)
        assert job.call("CtxSynchronize")[0] == "Done"
        job.launch_iota(2, params=bytes(20))              # 20 parameter bytes, the kernel takes 16
        job.launch_iota(3)
        kind, values, text = job.call("CtxSynchronize")
        assert (kind, values["status"]) == ("Error", INVALID_VALUE)
        assert b"carries 20 parameter bytes; its parameters take 16" in text
        assert job.call("CtxSynchronize")[0] == "Done"    # reported once
        assert job.first_ints(1) == [3]
    finally:
        job.close()


def test_a_device_fault_of_a_launch_skipping_python_reaches_the_next_synchronization(plane_server, iota_ptx):
    plane, server = plane_server
    job = Job(server, iota_ptx)
    try:
        job.launch_iota(1)
        assert job.call("CtxSynchronize")[0] == "Done"   # known now, and idle: the next ones may skip Python
        job.launch_iota(2, params=struct.pack("<Qii", 0x10, 1024, 0))    # writes where nothing is mapped
        job.launch_iota(3)
        kind, values, text = job.call("CtxSynchronize")
        assert (kind, values["status"]) == ("Error", ILLEGAL_ADDRESS), text
        assert job.call("CtxSynchronize")[0] == "Done"    # reported once
        assert job.first_ints(2) == [3, 4]                # the stream went on after the fault
    finally:
        job.close()


# Each block writes 100 * its cluster rank + its cluster's block count + 1000 if the
# launch named a cluster (%is_explicit_cluster).
CLUSTER_RANKS_PTX = b"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry ranks(.param .u64 out)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	.reg .pred %p1;
	ld.param.u64 %rd1, [out];
	mov.u32 %r1, %cluster_ctarank;
	mov.u32 %r2, %cluster_nctarank;
	mov.pred %p1, %is_explicit_cluster;
	selp.u32 %r3, 1000, 0, %p1;
	mad.lo.u32 %r4, %r1, 100, %r2;
	add.u32 %r4, %r4, %r3;
	mov.u32 %r5, %ctaid.x;
	mul.wide.u32 %rd2, %r5, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r4;
	ret;
}

.visible .entry ranks_of_two(.param .u64 out)
.reqnctapercluster 2, 1, 1
{
	.reg .b32 %r<6>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [out];
	mov.u32 %r1, %cluster_ctarank;
	mov.u32 %r2, %cluster_nctarank;
	mad.lo.u32 %r4, %r1, 100, %r2;
	mov.u32 %r5, %ctaid.x;
	mul.wide.u32 %rd2, %r5, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r4;
	ret;
}
\0"""


def test_cluster_launches_with_either_plane(plane_server):
    plane, server = plane_server
    job = PyClient(server.socket, priority=protocol.Priority.HIGH)
    try:
        module = job.call("ModuleLoad", CLUSTER_RANKS_PTX, size=len(CLUSTER_RANKS_PTX))[1]["module"]
        ranks = job.call("GetFunction", b"ranks", module=module)[1]["function"]
        twos = job.call("GetFunction", b"ranks_of_two", module=module)[1]["function"]
        out = job.call("MemAlloc", bytes=4096)[1]["dptr"]
        params = struct.pack("<Q", out)

        def launch(fn, blocks, cluster=(0, 0, 0)):
            job.send("LaunchKernel", params, function=fn, stream=LEGACY, grid=(blocks, 1, 1), block=(32, 1, 1),
                     cluster=cluster)

        def written(count):
            kind, values, _ = job.call("MemcpyDtoH", src=out, width=4 * count, height=1, src_pitch=4 * count,
                                       stream=LEGACY, dest=DEST_ARENA)
            data = job.segment.download.read(values["arena_offset"], values["size"])
            job.segment.download.release(values["arena_offset"], values["size"])
            return list(struct.unpack(f"<{count}i", data))

        for fn in (ranks, twos):          # through Python: the kernels become known
            launch(fn, 4)
            assert job.call("CtxSynchronize")[0] == "Done"
        for _ in range(10):               # then (cpp) straight to the device, clusters and all
            launch(ranks, 8, (4, 1, 1))
            launch(twos, 8)
        launch(ranks, 8, (4, 1, 1))
        assert written(8) == [1004, 1104, 1204, 1304] * 2
        launch(twos, 6)
        assert written(6) == [2, 102] * 3
        launch(ranks, 3)
        assert written(3) == [1, 1, 1]
        launch(ranks, 6, (4, 1, 1))       # refused (whichever plane saw it first): grid not a multiple
        kind, values, text = job.call("CtxSynchronize")
        assert (kind, values["status"]) == ("Error", 912) and b"is not a multiple of cluster 4x1x1" in text, text
        mine = [c for c in server.status()["clients"] if c["client_id"] == job.reply["client_id"]][0]
        if plane == "cpp":
            assert mine["requests_in_cpp"] >= 20, mine
        else:
            assert mine["requests_in_cpp"] == 0
    finally:
        job.close()
