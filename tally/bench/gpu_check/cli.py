"""`tally-bench gpu-check`: the command line of the GPU kit.

    tally-bench gpu-check --dry-run [--rehearse] [--quick]   # the plan: steps, budgets, commands, wheels
    tally-bench gpu-check [--steps a,b] [--quick]            # on a GPU machine (tools/gpu_check.sh starts it)
    tally-bench gpu-check --rehearse --quick                 # the steps on the CPU emulator (what CI runs)
    tally-bench gpu-check --rehearse --wheels .gpu-wheels --image-wheels .gpu-wheels-image   # + the offline install
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

from tally.bench.gpu_check import install, plan, report
from tally.bench.gpu_check.device import detect

RESULTS_DIR = Path("bench/results")


def add_parser(sub) -> None:
    g = sub.add_parser("gpu-check", help="the GPU kit: every GPU figure in one prepared command (--dry-run: the plan; "
                                         "--rehearse: its steps on the CPU emulator)")
    g.add_argument("--dry-run", action="store_true", help="print the plan (steps, commands, budgets, wheels) and exit")
    g.add_argument("--rehearse", action="store_true", help="run the steps on the CPU emulator instead of a GPU")
    g.add_argument("--quick", action="store_true", help="the short variant of each step (a rerun; CI's rehearsal)")
    g.add_argument("--steps", help="comma-separated steps to run, in the plan's order (default: all)")
    g.add_argument("--out", type=Path, default=Path("/tmp/tally-gpu-check"),
                   help="where each step's files and result go (default: %(default)s)")
    g.add_argument("--bundle", type=Path, help="also keep the results file, their JSON and a .tar.gz of --out here, "
                                               "rewritten after each step (a device call's $OUT)")
    g.add_argument("--results-dir", type=Path, help="where gpu-<date>-<device>.md goes (default: bench/results "
                                                    "on a GPU, --out in a rehearsal)")
    g.add_argument("--deadline-s", type=float, default=None,
                   help=f"seconds the steps may take together (default: {plan.DEVICE_CALL_S} less --spent-s)")
    g.add_argument("--spent-s", type=float, default=0.0, help="seconds of the device call already spent (the install)")
    g.add_argument("--install-log", type=Path, help="tools/gpu_check.sh's install log, summarized in the results")
    g.add_argument("--repo", type=Path, default=None, help="the repository root (default: found from here)")
    r = g.add_argument_group("the rehearsal's install (--rehearse without --quick)")
    r.add_argument("--wheels", type=Path, help=f"the carried wheels (tools/gpu_wheels.sh: {install.WHEELS_DIR})")
    r.add_argument("--image-wheels", type=Path,
                   help=f"the GPU image's packages as wheels (tools/gpu_wheels.sh --rehearsal: {install.IMAGE_WHEELS_DIR})")
    r.add_argument("--python", default="python3.12", help="the interpreter of the fresh venv (default: %(default)s)")
    # After its install the full rehearsal runs the steps again from the fresh venv, as the
    # GPU machine runs them from what it installed; this flag hands over the install's result.
    r.add_argument("--after-install", type=Path, help=argparse.SUPPRESS)


def find_repo(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "tests").is_dir():
            return folder
    return None


def main(args: argparse.Namespace) -> int:
    try:
        chosen = plan.select(args.steps)
    except ValueError as e:
        print(f"tally-bench gpu-check: {e}", file=sys.stderr)
        return 2
    repo = (args.repo or find_repo(Path.cwd()) or Path.cwd()).resolve()
    wheels = install.read_wheels()
    deadline = args.deadline_s if args.deadline_s is not None else plan.DEVICE_CALL_S - args.spent_s
    rehearse_install = args.rehearse and not args.quick and args.after_install is None
    shown = plan.Mode(args.rehearse, args.quick, repo, args.out)
    print(plan.format_plan(chosen, shown, wheels["carry"], install=not args.rehearse or rehearse_install or args.after_install is not None), flush=True)
    if args.dry_run:
        carried = repo / install.WHEELS_DIR
        if carried.is_dir():
            missing = install.missing_wheels(carried, wheels["carry"])
            print(f"  {carried}: " + (f"MISSING {', '.join(missing)} (run tools/gpu_wheels.sh)" if missing
                                       else "every carried wheel is there"))
        return 0
    if not (repo / "tests").is_dir():
        print(f"tally-bench gpu-check: {repo} has no tests/; run it from the repository root or give --repo",
              file=sys.stderr)
        return 2
    if not args.rehearse:
        from tally.bench.process_runner import gpu_present
        if not gpu_present():
            print("tally-bench gpu-check: no NVIDIA driver and GPU here; --rehearse runs the steps on the CPU "
                  "emulator, --dry-run prints the plan", file=sys.stderr)
            return 2
    if rehearse_install and not (args.wheels and args.image_wheels):
        print("tally-bench gpu-check: the full rehearsal installs tally offline from the carried wheels: run "
              "tools/gpu_wheels.sh --rehearsal and give --wheels .gpu-wheels --image-wheels .gpu-wheels-image "
              "(or --quick to rehearse the steps alone)", file=sys.stderr)
        return 2

    device = detect(args.rehearse)
    now = datetime.datetime.now(datetime.timezone.utc)
    date = now.strftime("%Y-%m-%d")
    command = "tally-bench gpu-check " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 \
        else "tally-bench gpu-check"
    name = f"gpu-{'rehearsal-' if args.rehearse else ''}{date}-{device.slug()}.md"
    results_dir = args.results_dir or (args.out if args.rehearse else repo / RESULTS_DIR)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.after_install:
        install_result = json.loads(args.after_install.read_text())
    elif rehearse_install:
        install_result = _install(args, repo)
        print(f"== install: {install_result['status']} in {install_result['wall_s']:.0f} s", flush=True)
        if install_result["status"] == "passed":
            return _steps_from_the_new_venv(install_result, args.out)
    else:
        install_result = _install_from_log(args.install_log, args.spent_s)

    def publish(results) -> None:
        text = report.markdown(results, device, now.strftime("%Y-%m-%d %H:%M"), command, args.rehearse, args.quick,
                               deadline, install_result)
        report.write_atomically(results_dir / name, text)
        if args.bundle:
            report.write_atomically(args.bundle / name, text)
            report.write_atomically(args.bundle / "gpu-check.json",
                                    report.results_json(results, device, date, command, install_result))
            _archive(args.out, args.bundle / "gpu-check-files.tar.gz")

    from tally.bench.gpu_check.runner import PASSED, run_steps
    publish([])
    if install_result is not None and install_result["status"] != "passed":
        print(f"tally-bench gpu-check: the install failed ({install_result.get('note', '')}); no step runs",
              file=sys.stderr)
        return 1
    results = run_steps(chosen, args.rehearse, args.quick, repo, args.out, deadline, publish)
    print(f"results: {results_dir / name}" + (f" (and {args.bundle})" if args.bundle else ""))
    for r in results:
        print(f"  {r.index}. {r.key:<16} {r.status:<12} {r.wall_s:6.1f} s" + (f"  {r.note}" if r.note else ""))
    return 0 if all(r.status == PASSED for r in results) else 1


def _install(args: argparse.Namespace, repo: Path) -> dict:
    print("== install (rehearsal): a fresh venv, the image's packages, then the carried install, offline", flush=True)
    return install.rehearse_install(repo, args.wheels.resolve(), args.image_wheels.resolve(), args.python,
                                    args.out / "00-install.log")


def _steps_from_the_new_venv(install_result: dict, out: Path) -> int:
    """Run this command again with the fresh venv's Python: its steps then use the
    installed tally and only the packages the GPU machine's image has."""
    from tally.cli import commands
    handed = out / "00-install.json"
    handed.write_text(json.dumps(install_result, indent=1) + "\n")
    python = str(Path(install_result["venv"]) / "bin" / "python")
    argv = [python, *commands.python_module("tally.cli.bench_main")[1:], *sys.argv[1:], "--after-install", str(handed)]
    print(f"== the steps run from {install_result['venv']}", flush=True)
    sys.stdout.flush()
    return subprocess.run(argv, check=False).returncode


def _install_from_log(log: Path | None, spent_s: float) -> dict | None:
    if log is None:
        return None
    text = log.read_text(errors="replace") if log.is_file() else ""
    ok = "Successfully installed" in text or "Requirement already satisfied: tally" in text
    tail = [line for line in text.splitlines() if line.strip()][-2:]
    return {"status": "passed" if ok else "failed", "wall_s": spent_s, "command": "tools/gpu_check.sh: "
            + " ".join(install.install_argv("python3", Path(install.WHEELS_DIR), Path("."))[1:]),
            "note": " / ".join(tail)}


def _archive(folder: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    tmp.rename(target)
