"""The server's metrics source on a GPU (tally/cluster/combined_source.py): the
device source's figures, completed by tally's own accounting where the device
source has none (SM activity and the high-priority share of it), at the device
source's times. Both sides are recorded traces here."""
from __future__ import annotations

from tally.cluster.combined_source import CombinedSource
from tally.cluster.device_metrics import DeviceSample
from tally.cluster.trace_source import TraceSource, write_trace


def test_accounting_fills_only_what_the_device_source_lacks(tmp_path):
    nvml = [DeviceSample(t=10.0, gpu_util_percent=80.0, temperature_c=70.0, memory_used_bytes=5, xid_errors=(79,)),
            DeviceSample(t=11.0, gpu_util_percent=20.0)]
    accounting = [DeviceSample(t=0.5, gpu_util_percent=99.0, sm_active_percent=60.0, hp_sm_active_percent=40.0,
                               memory_used_bytes=7),
                  DeviceSample(t=1.5, sm_active_percent=10.0)]
    write_trace(tmp_path / "nvml.jsonl", nvml)
    write_trace(tmp_path / "accounting.jsonl", accounting)
    source = CombinedSource(TraceSource(tmp_path / "nvml.jsonl"), TraceSource(tmp_path / "accounting.jsonl"))
    first, second = source.sample(), source.sample()
    assert first == DeviceSample(t=10.0, gpu_util_percent=80.0, temperature_c=70.0, memory_used_bytes=5,
                                 xid_errors=(79,), sm_active_percent=60.0, hp_sm_active_percent=40.0)
    assert second == DeviceSample(t=11.0, gpu_util_percent=20.0, sm_active_percent=10.0)
    assert source.sample() is None                     # both traces are over
    assert source.name == "trace nvml.jsonl + trace accounting.jsonl"
