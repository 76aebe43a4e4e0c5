"""A launch's limits have one source: the device attributes a backend reports. The
job's client checks its device snapshot of them, the emulator's Python launch and
its C++ issuer read the same numbers (device_attributes.launch_limits), so a device
with other attributes is refused alike on every path."""
from __future__ import annotations

import itertools
import os
import queue
import struct
import threading
from pathlib import Path

import pytest
from ptx_corpus import CORPUS_DIR, compile_ptx

from tally import _core, protocol
from tally.backends.device_attributes import ATTRIBUTE_IDS, LaunchLimits, launch_limits, synthetic_attributes
from tally.backends.emulator import EmulatorBackend
from tally.backends.emulator import backend as emulator_backend
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.client.modules import ModuleRegistry

ROOT = Path(__file__).resolve().parents[1]
_names = itertools.count()
KEY, FN = 0, 7
SMALL_BLOCK_X = 128


def test_the_limits_are_read_from_the_attributes():
    attrs = synthetic_attributes((9, 0), 8)
    assert launch_limits(attrs) == LaunchLimits(max_grid=(2**31 - 1, 65535, 65535), max_block=(1024, 1024, 64),
                                                max_threads=1024, max_shared_bytes=227 * 1024)
    backend = EmulatorBackend(printf_to_stdout=False)
    try:
        assert backend.limits == launch_limits(backend.describe().attributes)
    finally:
        backend.close()


@pytest.fixture
def small_device(monkeypatch):
    """An emulator whose attributes allow blocks only SMALL_BLOCK_X wide."""
    def attributes(cc, sm_count):
        attrs = synthetic_attributes(cc, sm_count)
        attrs[ATTRIBUTE_IDS["MAX_BLOCK_DIM_X"]] = SMALL_BLOCK_X
        return attrs

    monkeypatch.setattr(emulator_backend, "synthetic_attributes", attributes)
    backend = EmulatorBackend(printf_to_stdout=False)
    yield backend
    backend.close()


def vector_add(backend):
    registry = ModuleRegistry(backend)
    module = registry.load(compile_ptx(CORPUS_DIR / "vector_add.cu", arch="sm_90").encode())
    return registry.function(module.module_id, "vector_add").backend_function


def test_the_python_launch_refuses_what_the_attributes_refuse(small_device):
    assert small_device.limits.max_block[0] == SMALL_BLOCK_X
    fn, stream = vector_add(small_device), small_device.stream_create()
    a = small_device.mem_alloc(4 * 256)
    params = struct.pack("<QQQi", a, a, a, 256)
    with pytest.raises(DeviceError) as refused:
        small_device.launch(fn, (1, 1, 1), (2 * SMALL_BLOCK_X, 1, 1), 0, stream, params)
    assert refused.value.code == CUDA_ERROR_INVALID_VALUE
    small_device.launch(fn, (2, 1, 1), (SMALL_BLOCK_X, 1, 1), 0, stream, params)
    small_device.stream_synchronize(stream)


def test_the_cpp_issuer_hands_python_what_the_attributes_refuse(small_device):
    name = f"/tally-limits-{os.getpid()}-{next(_names)}"
    server = _core.Segment.create(name, 1 << 16, 1 << 16, 1 << 16, 1 << 16)
    client = _core.Segment.open(name)
    server.unlink()
    device = small_device.data_plane()
    plane = _core.data_plane.ClientPlane(server, device.issuer)
    fn, stream = vector_add(small_device), small_device.stream_create()
    assert device.register_function(plane, FN, fn, fn.param_bytes)
    plane.stream_rules(KEY, True, True)
    plane.open_lane(KEY, device.stream_handle(stream))
    plane.grant(KEY, True)
    to_python: queue.Queue = queue.Queue()
    loop = threading.Thread(target=plane.serve, args=(lambda k, tag, payload: to_python.put(bytes(payload)), 0.05),
                            daemon=True)
    loop.start()
    a = small_device.mem_alloc(4 * 256)
    params = struct.pack("<QQQi", a, a, a, 256)
    codec = protocol.codec("LaunchKernel")
    try:
        for width in (SMALL_BLOCK_X, 2 * SMALL_BLOCK_X):
            client.request_ring.push(codec.kind, 0, codec.pack(params, function=FN, stream=KEY, grid=(1, 1, 1),
                                                               block=(width, 1, 1)))
        wide = to_python.get(timeout=5)            # only the launch the attributes refuse reaches Python
        assert codec.unpack(wide)[0]["block"] == (2 * SMALL_BLOCK_X, 1, 1)
        assert {protocol.BY_KIND[k].message.name: n for k, n in plane.counts()[2].items()} == {"LaunchKernel": 1}
        assert to_python.empty()
    finally:
        plane.stop()
        loop.join(5)
        small_device.stream_synchronize(stream)
        client.close()


def test_the_module_names_no_limit_of_its_own():
    # the numbers live in the attribute table only (no second copy to drift)
    assert not hasattr(emulator_backend, "MAX_BLOCK") and not hasattr(emulator_backend, "MAX_SHARED_BYTES")
    source = (ROOT / "csrc" / "src" / "emulator" / "data_plane_issuer.cpp").read_text()
    assert "65535" not in source and "1024" not in source
