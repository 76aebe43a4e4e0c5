"""The kit's steps, in order of value, with their time budgets.

A budget is what a step may take on the GPU machine (16 cores, one H200); the
whole plan fits one device call of 8 minutes, the install included, so that a
15-minute lease (machine start included) leaves time to rerun the steps that
failed. `--quick` budgets are for that rerun. A step that runs past its budget
(plus a quarter) is stopped, and a step whose budget no longer fits what is
left of the deadline is not started: either way the results so far are kept."""
from __future__ import annotations

from pathlib import Path

from tally.bench.gpu_check import steps_bench, steps_metrics, steps_tests
from tally.bench.gpu_check.step import Mode, Step, shown_argv

DEVICE_CALL_S = 480          # one device call's wall-clock budget for the whole kit
INSTALL_BUDGET_S = 50        # tools/gpu_check.sh's pip install, before the kit starts (41 s on the H200)
OVERRUN = 1.25               # a step is stopped at its budget times this


def steps() -> tuple[Step, ...]:
    return (steps_tests.PYTEST_GPU, steps_tests.JOB_MATRIX, steps_bench.LAUNCH, steps_bench.COLOCATE_TORCH, steps_bench.PREEMPTION,
            steps_bench.SM_SHARE, steps_tests.DEVICE_FAULT, steps_metrics.NVML_METRICS, steps_bench.MIGRATION)


def optional_steps() -> tuple[Step, ...]:
    """Steps outside the default plan (it fills one device call), for a second call
    with `--steps`: the JIT-capture comparison, whose torch.compile start-ups alone
    take a minute."""
    return (steps_bench.JIT_CAPTURE,)


def select(names: str | None) -> tuple[Step, ...]:
    """The steps `--steps a,b` names, in the plan's order (optional steps last); every
    default step without it."""
    if not names:
        return steps()
    every = steps() + optional_steps()
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {s.key for s in every}
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise ValueError(f"--steps {names!r}: no step {', '.join(unknown) or '(none named)'}; "
                         f"the steps are {', '.join(s.key for s in every)}")
    return tuple(s for s in every if s.key in wanted)


def format_plan(chosen: tuple[Step, ...], mode: Mode, wheels: list[str], install: bool) -> str:
    """The plan the kit prints first: each step, its budget and its commands."""
    import shlex
    where = "the CPU emulator (rehearsal)" if mode.rehearse else "the GPU"
    lines = [f"tally gpu-check plan{' (--quick)' if mode.quick else ''}: {len(chosen)} steps on {where}"]
    total = 0
    if install:
        lines.append(f"  0. install            {INSTALL_BUDGET_S:4d} s  pip install --no-index --no-build-isolation "
                     f"--find-links <wheels> .  (tools/gpu_check.sh, before the kit)")
        total += INSTALL_BUDGET_S
    for i, step in enumerate(chosen, 1):
        budget = step.budget(mode.quick)
        total += budget
        lines.append(f"  {i}. {step.key:<16} {budget:4d} s  {step.title}: {step.what}")
        sample = Mode(mode.rehearse, mode.quick, mode.repo, Path("<out>") / step.key)
        for argv in step.commands(sample):
            lines.append("       $ " + " ".join(shlex.quote(a) for a in shown_argv(argv)))
    lines.append(f"  total budget {total} s of one {DEVICE_CALL_S} s device call"
                 + ("" if total <= DEVICE_CALL_S else "  (OVER: choose fewer --steps or --quick)"))
    chosen_keys = {s.key for s in chosen}
    for step in optional_steps():
        if step.key not in chosen_keys:
            lines.append(f"  optional (--steps {step.key}, {step.budget(mode.quick)} s): {step.title}: {step.what}")
    lines.append(f"  wheels carried for the install ({len(wheels)}): {', '.join(wheels)}")
    return "\n".join(lines)
