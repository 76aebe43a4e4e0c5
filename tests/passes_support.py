"""Helpers for the pass tests (tests/test_passes_*.py): the test kernels' sources,
ptxas runs that print the exact command to reproduce a failure, and a tiny
evaluator for the straight-line integer code the passes insert."""
from __future__ import annotations

import concurrent.futures
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ptx_corpus import TESTS_DIR, compile_ptx, cuda_tool

from ptx_passes.ir import Function, Immediate, Instruction, Register, SpecialReg, Symbol, \
    iter_instructions

PASS_SOURCES = TESTS_DIR / "cuda" / "passes"
ALL_PASSES = ("slicing", "unified-sync", "ptb", "ptb-raw")

# (source, arch, nvcc flags) of the kernels written for the pass tests.
PASS_KERNELS = {
    "grid_sync": ("grid_sync.cu", "sm_80", ()),
    "cluster": ("cluster.cu", "sm_90", ()),
    "dynamic_parallelism": ("dynamic_parallelism.cu", "sm_80", ("-rdc=true",)),
    "external_call": ("external_call.cu", "sm_80", ("-rdc=true",)),
    "sync_reductions": ("sync_reductions.cu", "sm_80", ()),
    "warp_sync": ("warp_sync.cu", "sm_80", ()),
    "refused_kernels": ("refused_kernels.cu", "sm_90", ()),
}


def pass_kernel_ptx(key: str) -> str:
    source, arch, flags = PASS_KERNELS[key]
    return compile_ptx(PASS_SOURCES / source, arch, flags)


# ---------------------------------------------------------------------------- ptxas


@dataclass(frozen=True)
class PtxasRun:
    command: tuple[str, ...]
    returncode: int
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def failure(self) -> str:
        return (f"ptxas rejected the PTX (exit {self.returncode}); reproduce with:\n"
                f"  {shlex.join(self.command)}\n{self.stderr}")


def ptxas_archs(targets: tuple[str, ...]) -> list[str]:
    """The ptxas -arch values to check a module with: sm_80 PTX on sm_80 and sm_90, sm_90
    PTX on sm_90, arch-specific targets (sm_90a) on themselves."""
    target = next((t for t in targets if t.startswith("sm_")), "sm_80")
    return ["sm_80", "sm_90"] if target == "sm_80" else [target]


def run_ptxas(ptx_path: Path, arch: str, output: str | Path = "/dev/null",
              extra: tuple[str, ...] = ()) -> PtxasRun:
    command = (cuda_tool("ptxas"), f"-arch={arch}", *extra, str(ptx_path), "-o", str(output))
    done = subprocess.run(command, capture_output=True, text=True)
    return PtxasRun(command, done.returncode, done.stderr)


def run_ptxas_many(jobs: list[tuple]) -> list[PtxasRun]:
    """run_ptxas(*job) for every job, one ptxas per core."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(lambda job: run_ptxas(*job), jobs))


# ---------------------------------------------------------------------------- evaluation


class Evaluator:
    """Runs straight-line 32/64-bit integer PTX (the block-index rebuild and PTB prologue)
    on concrete values: registers by name, parameters by symbol, special registers."""

    def __init__(self, params: dict[str, int], specials: dict[SpecialReg, int],
                 symbols: dict[str, int] | None = None):
        self.params = params
        self.specials = specials
        self.symbols = symbols or {}
        self.registers: dict[str, int] = {}

    def value(self, op) -> int:
        if isinstance(op, Register):
            return self.registers[op.name]
        if isinstance(op, SpecialReg):
            return self.specials[op]
        if isinstance(op, Immediate):
            return int(op.value)
        if isinstance(op, Symbol):
            return self.symbols[op.name]
        raise AssertionError(f"cannot evaluate operand {op!r}")

    def run(self, code: list[Instruction]) -> None:
        for ins in code:
            self.step(ins)

    def step(self, ins: Instruction) -> None:
        op = ins.full_opcode
        dest = ins.operands[0].name if ins.operands else None
        src = ins.operands[1:]
        u32 = 0xFFFFFFFF
        if op in ("ld.param.u32", "ld.param.u64"):
            result = self.params[ins.operands[1].base.name]
        elif op in ("mov.u32", "cvta.to.global.u64"):
            result = self.value(src[0])
        elif op == "add.u32":
            result = (self.value(src[0]) + self.value(src[1])) & u32
        elif op == "mul.lo.u32":
            result = (self.value(src[0]) * self.value(src[1])) & u32
        elif op == "rem.u32":
            result = self.value(src[0]) % self.value(src[1])
        elif op == "div.u32":
            result = self.value(src[0]) // self.value(src[1])
        elif op == "or.b32":
            result = self.value(src[0]) | self.value(src[1])
        elif op == "setp.eq.u32":
            result = int(self.value(src[0]) == self.value(src[1]))
        else:
            raise AssertionError(f"the evaluator does not know `{ins}`")
        self.registers[dest] = result


def instructions(fn: Function) -> list[Instruction]:
    return [ins for _b, _i, ins in iter_instructions(fn.body)]


def reads_of(fn: Function, special: SpecialReg) -> list[Instruction]:
    return [ins for ins in instructions(fn) if special in ins.operands]


def unravel(linear: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    """Row-major (x fastest) block coordinates of a linear block index."""
    return linear % grid[0], (linear // grid[0]) % grid[1], linear // (grid[0] * grid[1])
