"""Runs the chosen steps one after the other, each command under a time limit,
and writes each step's result file the moment the step ends, so that a device
call cut at its limit still returns every step that finished."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from tally.bench.gpu_check.plan import OVERRUN
from tally.bench.gpu_check.step import Mode, Step, shown_argv

PASSED, FAILED, TIMED_OUT, NOT_STARTED = "passed", "failed", "timed out", "not started"
INTERRUPT_GRACE_S = 15.0     # after SIGINT, what tally-bench gets to stop its servers and jobs
STALL_DUMP = "stall-dump.txt"
STALL_DUMP_BUDGET_S = 20.0   # all the dumps of one overrun together


@dataclass
class StepResult:
    index: int
    key: str
    title: str
    status: str
    budget_s: int
    wall_s: float = 0.0
    exit_codes: list[int] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)
    note: str = ""
    folder: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def _run_command(argv: list[str], env: dict, log, limit_s: float, cwd: Path) -> tuple[int | None, float]:
    """(exit code, or None when stopped at the limit; seconds). Output goes to the log
    and, line by line, to this process's stdout (what a device call shows). `cwd`: the
    step's own folder, never the repository, whose source tree (without its built C++)
    a `python -m` there, the tests' servers' included, would import instead of the
    installed tally."""
    begin = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               env={**os.environ, **env}, start_new_session=True, cwd=cwd)

    def copy() -> None:
        for line in process.stdout:
            log.write(line)
            log.flush()
            sys.stdout.write("    | " + line)
            sys.stdout.flush()

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=max(limit_s, 1.0))
    except subprocess.TimeoutExpired:
        # Where everything waited is what an overrun needs explained; ask before stopping it.
        dump_stalled(process.pid, cwd / STALL_DUMP)
        # SIGINT first: tally-bench stops every server and job it started (their own sessions).
        _signal_group(process, signal.SIGINT)
        try:
            process.wait(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()
        code = None
    reader.join(timeout=5)
    return code, time.monotonic() - begin


def dump_stalled(group: int, target: Path) -> None:
    """The Python threads (native frames too) of every tally-server on the machine and
    of the step's own processes, by py-spy (carried to the GPU machine with the wheels),
    into `target`. The first GPU run's launch and co-location steps overran with no
    clue where they waited; this is the clue."""
    spy = shutil.which("py-spy") or str(Path(sysconfig.get_path("scripts")) / "py-spy")
    pids = _stalled_pids(group)
    began = time.monotonic()
    with target.open("w") as out:
        out.write(f"processes: {' '.join(map(str, pids)) or 'none found'}\n")
        if not Path(spy).is_file():
            out.write("py-spy is not installed (tools/gpu_wheels.sh carries it): no thread dumps\n")
            return
        for pid in pids:
            left = STALL_DUMP_BUDGET_S - (time.monotonic() - began)
            out.write(f"=== pid {pid}: {_cmdline(pid)[:300]}\n")
            out.flush()
            if left < 1:
                out.write("(no time left for its dump)\n")
                continue
            try:
                subprocess.run([spy, "dump", "--native", "--pid", str(pid)], stdout=out, stderr=subprocess.STDOUT,
                               timeout=min(left, 10.0))
            except subprocess.TimeoutExpired:
                out.write("(py-spy took too long)\n")


def _stalled_pids(group: int) -> list[int]:
    """tally-server processes, then the step's process group (the bench and its jobs)."""
    servers, members = [], []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        argv = _cmdline(pid).split(" ")
        if any(a.endswith("/tally-server") or a == "tally.cli.server_main" for a in argv):
            servers.append(pid)
            continue
        try:
            if os.getpgid(pid) == group:
                members.append(pid)
        except OSError:
            pass
    return sorted(servers) + sorted(members)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def run_step(index: int, step: Step, mode: Mode, left_s: float) -> StepResult:
    budget = step.budget(mode.quick)
    argvs = step.commands(mode)
    result = StepResult(index, step.key, step.title, PASSED, budget, folder=mode.out.name,
                        commands=[" ".join(shlex.quote(a) for a in shown_argv(a)) for a in argvs])
    if budget > left_s:
        result.status, result.note = NOT_STARTED, f"needs {budget} s and {left_s:.0f} s were left"
        return result
    mode.out.mkdir(parents=True, exist_ok=True)
    limit = min(budget * OVERRUN, left_s)
    with (mode.out / "output.log").open("w") as log:
        for argv in argvs:
            code, took = _run_command(argv, step.env(mode), log, limit - result.wall_s, mode.out)
            result.wall_s += took
            if code is None:
                result.status = TIMED_OUT
                result.note = f"stopped after {result.wall_s:.0f} s (budget {budget} s)"
                break
            result.exit_codes.append(code)
            if code != 0:
                result.status = FAILED
    output = (mode.out / "output.log").read_text(errors="replace")
    try:
        result.figures = step.figures(mode, output)
    except Exception as e:      # a step's odd output must not cost the other steps' results
        result.note = (result.note + "; " if result.note else "") + f"its figures could not be read: {e!r}"
    if result.status == FAILED and not result.note:
        tail = [line for line in output.splitlines() if line.strip()][-3:]
        result.note = "exit " + ",".join(map(str, result.exit_codes)) + (": " + " / ".join(tail) if tail else "")
    return result


def run_steps(chosen: tuple[Step, ...], rehearse: bool, quick: bool, repo: Path, out: Path, deadline_s: float,
              on_result: Callable[[list[StepResult]], None]) -> list[StepResult]:
    """Run `chosen` in order within `deadline_s`; after each step its result file
    out/NN-key.json is written and on_result gets every result so far."""
    out.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    results: list[StepResult] = []
    for index, step in enumerate(chosen, 1):
        mode = Mode(rehearse, quick, repo, out / f"{index:02d}-{step.key}")
        left = deadline_s - (time.monotonic() - begin)
        print(f"== step {index}/{len(chosen)}: {step.key} (budget {step.budget(quick)} s, {left:.0f} s left)",
              flush=True)
        result = run_step(index, step, mode, left)
        print(f"== {step.key}: {result.status} in {result.wall_s:.1f} s" + (f" ({result.note})" if result.note else ""),
              flush=True)
        results.append(result)
        tmp = out / f".{mode.out.name}.json.tmp"
        tmp.write_text(json.dumps(result.to_json(), indent=1, sort_keys=True) + "\n")
        tmp.rename(out / f"{mode.out.name}.json")
        on_result(results)
    return results
