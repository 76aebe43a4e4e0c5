"""Writes the recorded device traces of this folder (run from the repository root:
python tests/data/health/make_traces.py). One sample per second of an 80 GiB,
700 W GPU running a steady load, with the episodes each trace is about; the
times in tests/test_health.py follow from these and health.toml."""
from pathlib import Path

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.trace_source import write_trace

GIB = 1 << 30
HERE = Path(__file__).parent
NORMAL = dict(gpu_util_percent=60.0, sm_clock_mhz=1755.0, sm_clock_max_mhz=1980.0, memory_used_bytes=40 * GIB,
              memory_total_bytes=80 * GIB, temperature_c=60.0, power_w=300.0, power_limit_w=700.0)


def sample(t, **changes):
    fields = {**NORMAL, **changes}
    return DeviceSample(t=float(t), **{k: v for k, v in fields.items() if v is not None})


def warning_recovery():
    """Idle down-clocking (not throttling), a one-sample temperature spike, a
    sustained warm spell with a reading missing in it, then recovery with an
    empty sample in the clear run."""
    out = []
    for t in range(0, 41):
        if t in (2, 3):
            out.append(sample(t, gpu_util_percent=0.0, sm_clock_mhz=300.0))
        elif t == 5:
            out.append(sample(t, temperature_c=90.0))
        elif t == 15:
            out.append(sample(t, temperature_c=None))
        elif 10 <= t <= 25:
            out.append(sample(t, temperature_c=88.0))
        elif t == 30:
            out.append(DeviceSample(t=30.0))
        else:
            out.append(sample(t, temperature_c=70.0 if t > 25 else 60.0))
    return out


def memory_overlimit():
    """Best-effort memory grows past the warning level, then past the limit; after
    three evictions it falls back."""
    out = []
    for t in range(0, 71):
        used = 40 * GIB
        if 10 <= t <= 14:
            used = 77 * GIB                      # 96.25%: over the warning level
        elif 15 <= t <= 50:
            used = 79 * GIB                      # 98.75%: over the limit
        elif 51 <= t <= 55:
            used = int(78.5 * GIB)               # 98.125%: still over after the first evictions
        elif t >= 56:
            used = 72 * GIB                      # 90%
        out.append(sample(t, memory_used_bytes=used))
    return out


def repeated_overlimit():
    """Four episodes of power over its limit (710 W of 700 W): three close together
    (the back-off grows, then hits its cap; the third outlasts its back-off), and a
    fourth entering Overlimit exactly overlimit_history_s after the third did,
    when all three have left the history."""
    high = (range(10, 46), range(80, 116), range(160, 261), range(460, 496))
    times = list(range(0, 271)) + list(range(272, 450, 2)) + list(range(450, 521))
    return [sample(t, power_w=710.0 if any(t in r for r in high) else 300.0) for t in times]


def xid_disable():
    """An application's XID (31, not fatal), then a fatal one (79); the device
    reads normal again afterwards, one sample even over a limit."""
    out = []
    for t in range(0, 46):
        xids = (31,) if t == 10 else (79,) if t == 20 else ()
        out.append(sample(t, xid_errors=xids, temperature_c=95.0 if t == 30 else 60.0))
    return out


if __name__ == "__main__":
    for make in (warning_recovery, memory_overlimit, repeated_overlimit, xid_disable):
        write_trace(HERE / f"{make.__name__}.jsonl", make())
