"""The NVML metrics source: NVML's figures to a DeviceSample, unsupported queries
as no figure, and a clear error where there is no driver. On a GPU (pytest -m
gpu) it samples the real device."""
from __future__ import annotations

import pynvml
import pytest

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.health import readings
from tally.cluster.health_config import Thresholds
from tally.cluster.nvml_source import DeviceLost, NvmlReadings, NvmlSource, NvmlUnavailable, query, readings_to_sample


def driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(driver_present(), reason="an NVIDIA driver is installed here")
def test_without_a_driver_construction_says_which_source_to_use_instead():
    with pytest.raises(NvmlUnavailable, match=r"NVML cannot start \(.+\): no NVIDIA driver here\?.*backend's own "
                                              r"accounting.*recorded trace \(tally.cluster.trace_source"):
        NvmlSource(0)


def test_nvml_figures_map_to_a_sample_in_the_units_samples_use():
    h100 = NvmlReadings(gpu_util_percent=87, sm_clock_mhz=1755, sm_clock_max_mhz=1980,
                        memory_used_bytes=61_203_136_512, memory_total_bytes=85_520_809_984, temperature_c=61,
                        power_mw=412_345, power_limit_mw=700_000, xids=(79,))
    sample = readings_to_sample(12.5, h100)
    assert sample == DeviceSample(t=12.5, gpu_util_percent=87.0, sm_clock_mhz=1755.0, sm_clock_max_mhz=1980.0,
                                  memory_used_bytes=61_203_136_512, memory_total_bytes=85_520_809_984,
                                  temperature_c=61.0, power_w=412.345, power_limit_w=700.0, xid_errors=(79,))
    assert sample.clock_factor == pytest.approx(1755 / 1980)
    got = readings(sample, Thresholds())
    assert got["power_percent_of_limit"] == pytest.approx(100 * 412.345 / 700)
    assert got["memory_used_percent"] == pytest.approx(100 * 61_203_136_512 / 85_520_809_984)
    assert got["sm_clock_min_mhz"] == 1755.0               # busy (87% >= 50%): the clock is read


def test_figures_nvml_does_not_have_are_none_and_zero_totals_are_no_figure():
    assert readings_to_sample(1.0, NvmlReadings()) == DeviceSample(t=1.0)
    vgpu = readings_to_sample(1.0, NvmlReadings(sm_clock_mhz=1410, sm_clock_max_mhz=0, memory_used_bytes=5,
                                                memory_total_bytes=0, power_mw=0, power_limit_mw=0))
    assert (vgpu.sm_clock_max_mhz, vgpu.memory_total_bytes, vgpu.power_limit_w, vgpu.power_w) == \
        (None, None, None, 0.0)
    assert vgpu.clock_factor is None
    assert readings(vgpu, Thresholds()) == {}              # nothing the health machine can judge


def raising(code):
    def call(*args):
        raise pynvml.NVMLError(code)
    return call


def test_an_unsupported_query_is_no_figure_and_a_lost_gpu_is_an_error():
    assert query("power", lambda handle: handle * 2, 21) == 42
    assert query("power", raising(pynvml.NVML_ERROR_NOT_SUPPORTED)) is None
    assert query("power", raising(pynvml.NVML_ERROR_NO_PERMISSION)) is None
    failed: set[str] = set()
    assert query("power", raising(pynvml.NVML_ERROR_UNKNOWN), failed=failed) is None
    assert failed == {"power"}                             # logged once, sampling goes on
    with pytest.raises(DeviceLost, match=r"the GPU is lost \(temperature: .*needs a reset or a reboot"):
        query("temperature", raising(pynvml.NVML_ERROR_GPU_IS_LOST))


@pytest.mark.gpu
@pytest.mark.skipif(not driver_present(), reason="no NVIDIA driver here (NVML cannot start)")
def test_a_real_gpu_gives_a_sample():
    source = NvmlSource(0)
    try:
        first, second = source.sample(), source.sample()
    finally:
        source.close()
    assert second.t >= first.t
    assert 0 < first.memory_used_bytes <= first.memory_total_bytes
    assert 0 <= first.gpu_util_percent <= 100 and 0 < first.sm_clock_max_mhz
    assert first.temperature_c is not None and first.power_limit_w is not None
    assert first.xid_errors == ()
