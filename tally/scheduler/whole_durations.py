"""How long the best-effort kernels that run whole take on the device, learned
from timed launches of each launch shape: what lets the priority policy keep
several short best-effort kernels on the device at once (a best-effort batch,
tally/scheduler/policies/priority.py) while bounding what a high-priority kernel
that arrives meanwhile waits for.

Why it matters: one best-effort unit at a time means one completion round trip
per kernel (launch, the device's end event, a host callback, the executor's
thread, the next launch). For a kernel of a few microseconds that round trip,
not the kernel, sets the job's pace: on the nested cuda backend an empty
best-effort kernel cost 340 us per launch against 5.5 us at high priority, and
on the first H200 run the launch benchmark's best-effort phase did not finish.
PyTorch's eager kernels (SASS only, so never sliced or PTB) are mostly such.

A shape's expected time is the largest of its last SAMPLES timed launches, the
very first launch left out (it carries one-time costs: a module loaded lazily,
a kernel the emulator compiles), and it is sampled again every RESAMPLE_EVERY
launches, so a kernel that got slower (more data behind the same shape) is
noticed and an unlucky slow sample ages out. The bound is only as good as the
samples: a kernel whose time depends on its data more than on its shape can
take longer than expected until its next sample (on a GPU, high-priority blocks
still go first once the batch's running blocks leave their SMs: the streams'
priorities). Timing costs one event pair and its
own completion callback for that launch only. At most MAX_SHAPES shapes are
kept (a job whose shapes change with its data makes new ones all the time); the
oldest goes first, and is timed again if it comes back.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

SAMPLES = 2
RESAMPLE_EVERY = 256
MAX_SHAPES = 65536


@dataclass(slots=True)
class _Shape:
    """One launch shape, from its first (left out) timed launch on."""

    recent: collections.deque               # its last timed device times
    since_sample: int = field(default=0)    # launches since the last timed one, once trusted


class WholeDurations:
    def __init__(self, samples: int = SAMPLES, resample_every: int = RESAMPLE_EVERY, max_shapes: int = MAX_SHAPES):
        if samples < 1 or resample_every < 1 or max_shapes < 1:
            raise ValueError(f"samples, resample_every and max_shapes must be >= 1, got {samples}, "
                             f"{resample_every}, {max_shapes}")
        self.samples = samples
        self.resample_every = resample_every
        self.max_shapes = max_shapes
        self._shapes: dict[str, _Shape] = {}    # kernel key -> its samples, oldest shape first

    def wants_sample(self, key: str, for_plane: bool = False) -> bool:
        """Whether this launch of `key` should be timed (call once per launch).
        `for_plane`: the job's C++ plane issues its batches itself, untimed, and sends
        a shape's launch here only until it is timed and then every `resample_every`
        of its own (docs/data-plane.md): each one that comes is timed."""
        shape = self._shapes.get(key)
        if shape is None or len(shape.recent) < self.samples:
            return True
        if for_plane:
            shape.since_sample = 0
            return True
        shape.since_sample += 1
        if shape.since_sample >= self.resample_every:
            shape.since_sample = 0
            return True
        return False

    def observe(self, key: str, device_seconds: float) -> None:
        if device_seconds < 0:
            return
        shape = self._shapes.get(key)
        if shape is None:               # the first launch: left out
            if len(self._shapes) >= self.max_shapes:
                del self._shapes[next(iter(self._shapes))]
            self._shapes[key] = _Shape(collections.deque(maxlen=self.samples))
            return
        shape.recent.append(device_seconds)

    def predicted(self, key: str) -> float | None:
        """The device time to expect of one launch of `key`; None until it was sampled."""
        shape = self._shapes.get(key)
        if shape is None or len(shape.recent) < self.samples:
            return None
        return max(shape.recent)
