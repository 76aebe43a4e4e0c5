"""Launchers that run a corpus kernel through its transformed variants
(ptx_passes: sliced, unified-sync, PTB with preemption) on a DeviceBackend,
following ptx_passes.launch_plan. Used by the pass equivalence tests with the
cases of emulator_corpus.py (pass one as `run_case(..., launcher=...)`).
"""
from __future__ import annotations

import functools
import struct
import time
from dataclasses import dataclass, field

import numpy as np
from ptx_corpus import CORPUS_DIR, compile_ptx

from ptx_passes import parse_module, print_module
from ptx_passes.launch_plan import (
    PTB_FLAG_OFFSET,
    PTB_STATE_BYTES,
    PTBKernel,
    total_blocks,
)
from ptx_passes.pipeline import VARIANT_SUFFIXES, transform_module

VARIANT_PASSES = ("slicing", "unified-sync", "ptb", "ptb-raw")


@functools.cache
def transformed_ptx(source: str, arch: str = "sm_90") -> tuple[str, dict]:
    """(module text with every variant, {kernel: KernelReport})."""
    ptx = compile_ptx(CORPUS_DIR / source, arch=arch)
    result = transform_module(parse_module(ptx, source), VARIANT_PASSES)
    return print_module(result.module), result.kernels


def launch_sliced(reports: dict, slices: int | str):
    """Runs a kernel as `slices` sliced launches ("per-block": one slice per block)."""
    def launch(backend, module, name, grid, block, shared, stream, params):
        desc = reports[name].sliced
        n = total_blocks(grid) if slices == "per-block" else slices
        fn = backend.module_function(module, desc.name)
        for s in desc.slices(grid, n):
            backend.launch(fn, (s.count, 1, 1), block, shared, stream, desc.params(params, grid, s.block_offset))
    return launch


def launch_variant(pass_name: str):
    """Runs the variant made by `pass_name` with the original grid and parameters (unified-sync)."""
    def launch(backend, module, name, grid, block, shared, stream, params):
        fn = backend.module_function(module, name + VARIANT_SUFFIXES[pass_name])
        backend.launch(fn, grid, block, shared, stream, params)
    return launch


@dataclass
class PTBLog:
    """What a PTB run did: tasks taken after each launch (the preemption points)."""

    counters: list[int] = field(default_factory=list)


class PTBRunner:
    """Runs a kernel's PTB variant with `workers` worker blocks.

    preempt = "none": one launch; "before": the flag is set before the first
    launch (no task may start), then cleared and the kernel relaunched;
    "during": another stream sets the flag once the task counter reaches
    `at_task` while the kernel runs; relaunches resume until the counter says
    every task is done (launch_plan's host protocol). "resume": a deterministic
    preemption point: the first `at_task` blocks run as one sliced launch (what a
    PTB launch stopped after `at_task` tasks has done), then the PTB kernel
    resumes from a task counter preset to `at_task`."""

    def __init__(self, reports: dict, workers: int, preempt: str = "none", at_task: int = 1,
                 variant: str = "ptb"):
        self.reports = reports
        self.workers = workers
        self.preempt = preempt
        self.at_task = at_task
        self.variant = variant
        self.log = PTBLog()

    def __call__(self, backend, module, name, grid, block, shared, stream, params):
        original = self.reports[name].ptb
        desc = PTBKernel(name + VARIANT_SUFFIXES[self.variant], original.original_name,
                         original.original_param_bytes)
        fn = backend.module_function(module, desc.name)
        state = backend.mem_alloc(PTB_STATE_BYTES)
        side = backend.stream_create()
        try:
            backend.memset_async(state, 0, 4, 2, stream)
            if self.preempt == "resume":
                done = min(self.at_task, total_blocks(grid))
                sliced = self.reports[name].sliced
                if done:
                    backend.launch(backend.module_function(module, sliced.name), (done, 1, 1), block, shared, stream,
                                   sliced.params(params, grid, 0))
                backend.memcpy_htod_async(state, memoryview(struct.pack("<I", done)), stream)
            if self.preempt == "before":
                self._set_flag(backend, state, 1, stream)
            total = total_blocks(grid)
            for attempt in range(total + 2):
                backend.launch(fn, (self.workers, 1, 1), block, shared, stream, desc.params(params, grid, state))
                if self.preempt == "during" and attempt == 0:
                    self._preempt_when(backend, state, stream, side)
                counter = self._read(backend, state, stream)[0]
                self.log.counters.append(counter)
                if counter >= total:
                    return
                self._set_flag(backend, state, 0, stream)
            raise AssertionError(f"PTB kernel {desc.name} made no progress: counters {self.log.counters}")
        finally:
            backend.stream_synchronize(side)
            backend.stream_destroy(side)
            backend.stream_synchronize(stream)
            backend.mem_free(state)

    def _preempt_when(self, backend, state, stream, side) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._read(backend, state, side)[0] >= self.at_task or backend.stream_query(stream):
                break
        self._set_flag(backend, state, 1, side)
        backend.stream_synchronize(side)

    @staticmethod
    def _set_flag(backend, state, value, stream) -> None:
        backend.memcpy_htod_async(state + PTB_FLAG_OFFSET, memoryview(struct.pack("<I", value)), stream)

    @staticmethod
    def _read(backend, state, stream) -> tuple[int, int]:
        out = np.zeros(2, np.uint32)
        backend.memcpy_dtoh_async(memoryview(out).cast("B"), state, stream)
        backend.stream_synchronize(stream)
        return int(out[0]), int(out[1])
