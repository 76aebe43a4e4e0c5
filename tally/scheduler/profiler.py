"""The transparent profiler: how each best-effort kernel should run.

For a kernel (name + launch shape) the candidates are
- PTB with W = k * sm_count workers (k = 1, 2, 4, ... while W < blocks);
  turnaround = time per round of tasks (launch time / ceil(tasks / W)),
- slices of k * sm_count blocks (k = 1, 2, 4, ... while smaller than the grid);
  turnaround = one slice's time,
- the original kernel; turnaround = its whole time.
Each is measured by running it for real during the job's normal execution (a
sliced or PTB run computes the same result by construction); measurements taken
while high-priority work shared the device are not used. The choice is the
candidate with the highest throughput (blocks per second) whose turnaround is
within the threshold, else the fastest of those with (within 10%) the smallest
turnaround. Kernels that cannot be transformed run as they are.

Exploring must not itself hurt the high-priority job, so a coarse candidate is
only tried when its predicted turnaround (its blocks at the best throughput
seen, and never less than a finer slicing measured) is within twice the
threshold; PTB candidates are always safe to try (a PTB launch can be stopped
after one task), but once doubling the workers gains under 5% (all resident),
larger counts are skipped. Exploring must not cost the best-effort job much
either: a slicing is measured on a few slices and the executor moves the rest
of the kernel on to the next candidate.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from tally.scheduler.profile_cache import ProfileCache
from tally.scheduler.run_mode import RunMode

log = logging.getLogger(__name__)

DEFAULT_TURNAROUND_THRESHOLD_MS = 0.0316   # Tally's artifact default
EXPLORE_MARGIN = 2.0
UNCLEAN_LIMIT = 8          # after this many contended runs, accept contended measurements
NEAR_TIE = 1.1
SATURATED = 1.05           # PTB: doubling workers gained less than this -> stop exploring


# How profile files (format 1) spell a whole kernel; kept so existing files still load.
_WHOLE_LABEL = "original"


@dataclass(frozen=True)
class RunConfig:
    kind: RunMode
    size: int = 0            # workers (PTB) or blocks per slice (SLICE); 0 for WHOLE

    @property
    def label(self) -> str:
        return _WHOLE_LABEL if self.kind is RunMode.WHOLE else f"{self.kind.value}:{self.size}"

    @staticmethod
    def from_label(label: str) -> "RunConfig":
        if label == _WHOLE_LABEL:
            return WHOLE_KERNEL
        kind, _, size = label.partition(":")
        if kind not in (RunMode.SLICE.value, RunMode.PTB.value):
            raise ValueError(f"unknown run configuration {label!r}")
        return RunConfig(RunMode(kind), int(size or 0))


WHOLE_KERNEL = RunConfig(RunMode.WHOLE)


@dataclass
class Measurement:
    units: int = 0
    blocks: int = 0
    seconds: float = 0.0             # launch-to-notification time of the units (for throughput)
    turnaround: float = 0.0          # worst unit turnaround on the device (seconds)
    unclean: int = 0

    @property
    def throughput(self) -> float:   # blocks per second
        return self.blocks / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {"units": self.units, "blocks": self.blocks, "seconds": self.seconds,
                "turnaround": self.turnaround}

    @staticmethod
    def from_json(d: dict) -> "Measurement":
        return Measurement(int(d["units"]), int(d["blocks"]), float(d["seconds"]), float(d["turnaround"]))


def kernel_key(name: str, grid: tuple, block: tuple, shared_bytes: int) -> str:
    return f"{name}|{grid[0]}x{grid[1]}x{grid[2]}|{block[0]}x{block[1]}x{block[2]}|{shared_bytes}"


def candidates(total_blocks: int, sm_count: int, can_slice: bool, can_ptb: bool,
               max_workers: int | None = None) -> list[RunConfig]:
    """In measuring order: PTB by workers, slices by size, then the original.
    `max_workers` caps PTB workers (a client's SM share)."""
    out = []
    if can_ptb:
        cap = total_blocks - 1 if max_workers is None else min(max_workers, total_blocks - 1)
        k = 1
        while k * sm_count <= cap and k <= 32:
            out.append(RunConfig(RunMode.PTB, k * sm_count))
            k *= 2
        if not out and cap >= 1 and max_workers is not None:
            out.append(RunConfig(RunMode.PTB, cap))
    if can_slice:
        k = 1
        while k * sm_count < total_blocks:
            out.append(RunConfig(RunMode.SLICE, k * sm_count))
            k *= 2
    out.append(WHOLE_KERNEL)
    return out


class TransparentProfiler:
    def __init__(self, sm_count: int, turnaround_threshold_ms: float = DEFAULT_TURNAROUND_THRESHOLD_MS,
                 cache: ProfileCache | None = None, min_units: int = 2):
        if sm_count < 1:
            raise ValueError(f"sm_count must be >= 1, got {sm_count}")
        if not turnaround_threshold_ms > 0:
            raise ValueError(f"turnaround threshold must be > 0 ms, got {turnaround_threshold_ms}")
        self.sm_count = sm_count
        self.threshold = turnaround_threshold_ms / 1000.0
        self.min_units = max(1, min_units)
        self.cache = cache
        self._measured: dict[str, dict[RunConfig, Measurement]] = {}
        self._choices: dict[tuple, RunConfig] = {}
        if cache is not None:
            for key, record in cache.load().items():
                try:
                    self._measured[key] = {RunConfig.from_label(label): Measurement.from_json(m)
                                           for label, m in record["measurements"].items()}
                except (KeyError, ValueError, TypeError) as e:
                    log.warning("ignoring unreadable profile for %s in %s: %s", key, cache.path, e)

    # the executor's questions -------------------------------------------------------
    def plan(self, key: str, total_blocks: int, *, can_slice: bool, can_ptb: bool,
             max_workers: int | None = None) -> tuple[RunConfig, bool]:
        """How to run this kernel now: (config, measuring). `measuring` means the
        run is a measurement: report its units with observe()."""
        choice_key = (key, can_slice, can_ptb, max_workers)
        choice = self._choices.get(choice_key)
        if choice is not None:
            return choice, False
        cands = candidates(total_blocks, self.sm_count, can_slice, can_ptb, max_workers)
        if cands == [WHOLE_KERNEL]:
            self._choices[choice_key] = WHOLE_KERNEL
            return WHOLE_KERNEL, False
        measured = self._measured.setdefault(key, {})
        nxt = self._next_candidate(cands, measured, total_blocks)
        if nxt is not None:
            return nxt, True
        choice = self._choose(cands, measured)
        self._choices[choice_key] = choice
        log.info("profiled %s: %s", key, choice.label)
        return choice, False

    def observe(self, key: str, config: RunConfig, *, device_seconds: float, cycle_seconds: float,
                blocks: int, clean: bool) -> None:
        """One unit (slice, PTB launch or whole kernel) of a measuring run ended:
        it ran `blocks` blocks (tasks) in `device_seconds` on the device, and took
        `cycle_seconds` from its launch until the executor could launch the next
        one (device time plus launch and notification latency). Turnaround comes
        from the former (what a high-priority kernel waits for), throughput from
        the latter (what the best-effort job gets: small slices pay the gaps)."""
        if blocks <= 0 or device_seconds <= 0:
            return
        seconds = max(cycle_seconds, device_seconds)
        m = self._measured.setdefault(key, {}).setdefault(config, Measurement())
        if self._complete(m):
            return
        if not clean:
            m.unclean += 1
            if m.unclean < UNCLEAN_LIMIT:
                return
        if config.kind is RunMode.PTB:
            turnaround = device_seconds / -(-blocks // config.size)
        else:
            turnaround = device_seconds
        m.units += 1
        m.blocks += blocks
        m.seconds += seconds
        m.turnaround = max(m.turnaround, turnaround)
        if self._complete(m):
            self._save()

    def is_measured(self, key: str, config: RunConfig) -> bool:
        m = self._measured.get(key, {}).get(config)
        return m is not None and self._complete(m)

    def choice(self, key: str, *, can_slice: bool = True, can_ptb: bool = True,
               max_workers: int | None = None) -> RunConfig | None:
        """The decided configuration, or None while the kernel is being profiled."""
        return self._choices.get((key, can_slice, can_ptb, max_workers))

    def measurements(self, key: str) -> dict[RunConfig, Measurement]:
        return dict(self._measured.get(key, {}))

    # internals ---------------------------------------------------------------------------
    def _complete(self, m: Measurement) -> bool:
        return m.units >= self.min_units

    def _next_candidate(self, cands: list[RunConfig], measured: dict[RunConfig, Measurement],
                        total_blocks: int) -> RunConfig | None:
        done = {c: m for c, m in measured.items() if c in cands and self._complete(m)}
        best_rate = max((m.throughput for m in done.values()), default=0.0)
        floor = 0.0      # a coarser slicing never turns around faster than a finer one
        ptb_rates: list[float] = []
        for c in cands:
            if c in done:
                if c.kind is RunMode.SLICE:
                    floor = max(floor, done[c].turnaround)
                elif c.kind is RunMode.PTB:
                    ptb_rates.append(done[c].throughput)
                continue
            if c.kind is RunMode.PTB:
                # once doubling the workers stopped paying (all resident), more won't
                if len(ptb_rates) >= 2 and ptb_rates[-1] < SATURATED * ptb_rates[-2]:
                    continue
            elif best_rate > 0:
                blocks = total_blocks if c.kind is RunMode.WHOLE else c.size
                if max(blocks / best_rate, floor) > EXPLORE_MARGIN * self.threshold:
                    continue
            return c
        return None

    def _choose(self, cands: list[RunConfig], measured: dict[RunConfig, Measurement]) -> RunConfig:
        done = [(c, measured[c]) for c in cands if c in measured and self._complete(measured[c])]
        if not done:
            return WHOLE_KERNEL
        within = [(c, m) for c, m in done if m.turnaround <= self.threshold]
        if not within:
            # nothing meets the threshold: take the smallest turnaround, treating
            # turnarounds within NEAR_TIE of it as equal (measurement noise must not
            # pick a configuration with a quarter of the throughput)
            best = min(m.turnaround for _c, m in done)
            within = [(c, m) for c, m in done if m.turnaround <= best * NEAR_TIE]
        return max(within, key=lambda cm: (cm[1].throughput, -cm[1].turnaround))[0]

    def _save(self) -> None:
        if self.cache is None:
            return
        records = {key: {"measurements": {c.label: m.to_json() for c, m in ms.items()
                                          if self._complete(m)}}
                   for key, ms in self._measured.items()}
        self.cache.save({k: v for k, v in records.items() if v["measurements"]})
