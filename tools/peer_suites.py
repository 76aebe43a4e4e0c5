"""Other projects' own CUDA test suites under tally: numba-cuda's (cudadrv, cudapy),
cuda-bindings' driver tests (cuda-python's cuda_bindings/tests/test_cuda.py), Triton's
language tests (python/test/unit/language/test_core.py) and CuPy's core and CUDA-API tests
(tests/cupy_tests/core_tests, cuda_tests), run as a new user would run them, each test module (for
Triton, each test function) its own job under tally-run against one emulator tally-server.

    python tools/peer_suites.py [--venv DIR] [--suites numba-cudadrv,numba-cudapy,cuda-bindings,triton-core,cupy-core,cupy-cuda]
                                [--cuda-bindings-tests DIR] [--triton-tests DIR] [--per-function K]
                                [--cupy-tests DIR] [--no-jit-capture] [--modules NAME,...] [--timeout 900]
                                [--json out.json] [--md out.md]

Without --venv it makes a throwaway virtual environment and installs numba-cuda
0.30.4 with NVVM and NVRTC 13.0 (the PTX ISA of the 13.0 driver the emulator reports)
and pytest; with --venv it uses that one as it is. cuda-bindings' tests are not a
package: pass the directory of a cuda-python checkout's cuda_bindings/tests (ideally
the tag of the installed cuda-bindings); they are read from there, never copied here.
Triton's neither: pass --triton-tests, the python/test/unit directory of a Triton
checkout at the installed version, with the repository's pytest.ini and
python/test/conftest.py where they are in the repository (its `device` fixture); the
venv needs a CUDA build of PyTorch with that Triton, and pytest. test_core.py has about
9,400 tests of 179 functions; --per-function K runs K of each function's cases, spread
evenly over its parameter list (0: all). Its kernels run on the emulator only through
JIT capture; --no-jit-capture runs them as tally did before it.
CuPy's (cupy-core, cupy-cuda) neither: pass --cupy-tests, the root of a CuPy checkout at the installed version's
tag (its tests/ and pyproject.toml, whose pytest settings and markers the tests need);
the venv needs that CuPy (cupy-cuda13x) and pytest, and the CUDA libraries its tests load
(nvidia-curand, -cublas, -cufft, -cusparse, -cusolver, -nvjitlink, -cuda-runtime for
cudadevrt). Its modules run with `-m "not slow and not multi_gpu"` against a server that
emulates compute capability 12.1 and driver 13.2 (CUPY_SERVER, for every suite of
the run): CuPy 14.2's own compiled modules (its CUB reductions) carry PTX only for
compute_120, of ISA 9.2, and at 9.0 its reductions return 0 (its CUB call's load error
is not checked); cuRAND 10.4's kernels carry PTX only for compute_121 (cubins for the
rest), so at 12.0 every cupy.random call fails.

Each module is its own job because a kernel fault stays with its process, as CUDA
specifies: in one process, one unsupported instruction would fail every later test.
Prints passed/failed/skipped per suite and the failures grouped by cause (exception
type and the first line of its message, numbers and addresses made alike), and watches
the server as the suites run: alive and answering after every job, no job left
attached, device bytes held at the end, its resident memory.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_samples import job_env, start_server, stop  # noqa: E402  (one way to start a server)

from tally.cli.server_main import query_status  # noqa: E402

NUMBA_CUDA = "numba-cuda==0.30.4"
# NVVM/NVRTC 13.0: a newer NVVM writes PTX a 13.0 driver (the emulator's default) refuses.
# filecheck, ml_dtypes, cffi, psutil: what numba-cuda's tests import (its "test" dependency group).
INSTALL = (NUMBA_CUDA, "nvidia-nvvm==13.0.*", "nvidia-cuda-nvrtc==13.0.*", "pytest", "filecheck", "ml_dtypes",
           "cffi", "psutil")
SUITES = ("numba-cudadrv", "numba-cudapy", "cuda-bindings", "triton-core", "cupy-core", "cupy-cuda")
TRITON_CORE = Path("language") / "test_core.py"
CUPY_CORE = Path("tests") / "cupy_tests" / "core_tests"
# CuPy's suites: the folder of each (its tests of the CUDA API wrappers: streams, events,
# memory, graphs, the driver and runtime calls, compiler, cuRAND, cuBLAS bindings).
CUPY_SUITES = {"cupy-core": CUPY_CORE, "cupy-cuda": Path("tests") / "cupy_tests" / "cuda_tests"}
CUPY_SERVER = ("--emulate-cc", "12.1", "--emulate-driver", "13.2")
# numba-cuda's CUDATestCase uses a fixture its repository's top-level conftest.py defines,
# which the wheel does not ship; a plugin with the same name stands in (it only passes
# pytest's options to numba's config there; these runs pass none).
FIXTURES = Path("tally_peer_fixtures.py")
FIXTURES_TEXT = (
    "import pytest\n\n\n@pytest.fixture(scope='class')\n"
    "def initialize_from_pytest_config(request):\n    yield\n")
SETTLE_S = 30.0            # how long a left job may take to be let go before it counts as held


@dataclass
class Module:
    suite: str
    path: Path
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    outcome: str = "ran"             # ran / crashed / timeout
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)   # (test id, cause)
    skips: list[str] = field(default_factory=list)                  # skip reasons
    attached_after: int = 0          # jobs still attached once this one was let go
    name: str = ""                   # a Triton test function (its cases are `tests`)
    tests: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name or self.path.stem


def cause(message: str, text: str = "") -> str:
    """What a failure's message says, made comparable across tests: the first line,
    numbers, addresses and long quoted names replaced by placeholders. pytest's message for
    an error while collecting is only "collection failure": its last `E` line says why."""
    if message in ("collection failure", "") and text:
        said = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
        message = said[-1] if said else message
    line = (message or "").strip().splitlines()[0] if (message or "").strip() else "(no message)"
    line = re.sub(r"0x[0-9a-fA-F]+", "<addr>", line)
    line = re.sub(r"(?<![A-Za-z_])\d+(\.\d+)?", "N", line)
    line = re.sub(r"'[^']{24,}'", "'...'", line)
    return line[:200]


def read_junit(path: Path, module: Module) -> None:
    for case in ET.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}.{case.get('name', '')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            module.failed += 1
            module.failures.append((test, cause(bad.get("message") or "", bad.text or "")))
        elif skip is not None:
            module.skipped += 1
            module.skips.append(cause(skip.get("message", "")))
        else:
            module.passed += 1


# ---- the suites ---------------------------------------------------------------------------

def make_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", *INSTALL], check=True)
    return where


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import numba_cuda, os; print(os.path.dirname(numba_cuda.__file__))"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"numba-cuda is not installed in {python}: {out.stderr.strip().splitlines()[-1:]}")
    return Path(out.stdout.strip())


def modules(python: Path, suites: list[str], bindings_tests: Path | None, only: set[str],
            cupy_tests: Path | None = None) -> list[Module]:
    found = []
    if any(s.startswith("numba-") for s in suites):
        tests = site_packages(python) / "numba" / "cuda" / "tests"
        for suite in suites:
            if suite.startswith("numba-"):
                found += [Module(suite, p) for p in sorted((tests / suite.removeprefix("numba-")).glob("test_*.py"))]
    if "cuda-bindings" in suites:
        if bindings_tests is None:
            raise SystemExit("cuda-bindings: pass --cuda-bindings-tests, a cuda-python checkout's "
                             "cuda_bindings/tests directory")
        found.append(Module("cuda-bindings", bindings_tests / "test_cuda.py"))
    for suite, folder in CUPY_SUITES.items():
        if suite in suites:
            top = cupy_tests / folder       # fusion_tests/ has modules named like core_tests' own
            found += [Module(suite, p, name=".".join(p.relative_to(top).with_suffix("").parts))
                      for p in sorted(top.rglob("test_*.py"))]
    return [m for m in found if not only or m.path.stem in only or m.name in only]


def spread(cases: list[str], k: int) -> list[str]:
    """k of `cases`, evenly spaced, the first and the last among them (all when k is 0)."""
    if k <= 0 or len(cases) <= k:
        return cases
    if k == 1:
        return cases[:1]
    return [cases[round(i * (len(cases) - 1) / (k - 1))] for i in range(k)]


def triton_modules(python: Path, socket: Path, tests: Path, per_function: int, env: dict,
                   only: set[str]) -> list[Module]:
    """test_core.py's test functions, each a Module with its chosen cases. Collecting
    imports Triton's helpers, which ask the CUDA driver about the device: a job too."""
    command = [sys.executable, "-m", "tally.cli.run_main", "--server", str(socket), "--", str(python), "-m", "pytest",
               "--collect-only", "-q", "-p", "no:cacheprovider", str(TRITON_CORE)]
    done = subprocess.run(command, cwd=tests, capture_output=True, text=True, env=env, timeout=900)
    # pytest names tests from its rootdir (the repository's, where pytest.ini is); the jobs
    # name them from python/test/unit
    here = f"{TRITON_CORE.as_posix()}::"
    ids = [line[line.index(here):].strip() for line in done.stdout.splitlines() if here in line]
    if not ids:
        raise SystemExit(f"triton-core: collecting {TRITON_CORE} found no tests:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    by_function: dict[str, list[str]] = {}
    for test in ids:
        by_function.setdefault(test.split("::")[1].split("[")[0], []).append(test)
    return [Module("triton-core", tests / TRITON_CORE, name=name, tests=spread(cases, per_function))
            for name, cases in by_function.items() if not only or name in only]


# ---- the server and the jobs --------------------------------------------------------------

def attached(socket: Path) -> int:
    status = query_status(socket, timeout=10.0)
    return len(status["clients"]) + status["server"].get("clients_leaving", 0)


def held_bytes(socket: Path) -> int:
    server = query_status(socket, timeout=10.0)["server"]
    return server["memory_total"] - server["memory_free"]


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_module(module: Module, python: Path, socket: Path, work: Path, timeout: float, env: dict,
               run_flags: tuple[str, ...] = ()) -> None:
    report = work / f"{module.suite}-{module.label}.xml"
    log = work / f"{module.suite}-{module.label}.log"
    report.unlink(missing_ok=True)
    # -p no:cacheprovider: the suites' directories may be read-only site-packages
    if module.suite.startswith("numba-"):
        # numba's tests by module name: run from their directory, pytest would import
        # site-packages' numba_cuda/numba as a top-level `numba` in place of the real one.
        # consider_namespace_packages: `numba` is a namespace package, and without it the
        # importlib mode names the module `cuda.tests...`, which the children test_init
        # spawns cannot import (4 failures of cudadrv that were the harness's, not tally's).
        name = f"numba.cuda.tests.{module.suite.removeprefix('numba-')}.{module.path.stem}"
        target, cwd = ["--import-mode=importlib", "-o", "consider_namespace_packages=true", "-p", FIXTURES.stem,
                       "--pyargs", name], work
        (work / FIXTURES.name).write_text(FIXTURES_TEXT)
    elif module.tests:      # Triton's: from python/test/unit, as its Makefile runs them
        target, cwd = module.tests, module.path.parent.parent
    elif module.suite in CUPY_SUITES:   # from the checkout's root, where its pytest settings are
        root = next(p for p in module.path.parents if (p / "pyproject.toml").is_file())
        target, cwd = ["-m", "not slow and not multi_gpu", str(module.path.relative_to(root))], root
    else:   # cuda-bindings' tests import their conftest as a top-level module
        target, cwd = [str(module.path)], module.path.parent
    command = [sys.executable, "-m", "tally.cli.run_main", "--server", str(socket), *run_flags, "--",
               str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
               "-o", "junit_family=xunit1", *target]
    started = time.monotonic()
    with log.open("wb") as out:
        job = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            job.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)     # tally-run and pytest: the group this tool started
            job.wait()
            module.outcome = "timeout"
    module.seconds = round(time.monotonic() - started, 1)
    if report.exists():
        read_junit(report, module)
    if module.outcome != "timeout" and not report.exists():
        module.outcome = "crashed"
    if module.outcome != "ran":
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        module.failed += 1
        module.failures.append((module.label, f"job {module.outcome}: {cause(tail[0])}"))


def settle(socket: Path) -> int:
    deadline = time.monotonic() + SETTLE_S
    while (left := attached(socket)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


# ---- the report ---------------------------------------------------------------------------

def summarize(results: list[Module], server: dict) -> dict:
    suites = {}
    for suite in dict.fromkeys(m.suite for m in results):
        mine = [m for m in results if m.suite == suite]
        counts = {k: sum(getattr(m, k) for m in mine) for k in ("passed", "failed", "skipped")}
        ran = counts["passed"] + counts["failed"]
        suites[suite] = {**counts, "modules": len(mine), "pass_rate": round(counts["passed"] / ran, 4) if ran else None,
                         "causes": Counter(c for m in mine for _, c in m.failures).most_common(),
                         "skip_reasons": Counter(s for m in mine for s in m.skips).most_common(),
                         "not_ran": [m.label for m in mine if m.outcome != "ran"]}
    return {"date": datetime.date.today().isoformat(), "suites": suites, "server": server,
            "modules": [{**asdict(m), "path": str(m.path)} for m in results]}


def markdown(report: dict) -> str:
    s = report["server"]
    lines = [f"# Peer suites under tally-run, one emulator tally-server ({report['date']})", "",
             f"{', '.join(report.get('versions', []))}", "",
             "| suite | modules | passed | failed | skipped | pass rate of those that ran |", "|---|---|---|---|---|---|"]
    for name, x in report["suites"].items():
        rate = f"{100 * x['pass_rate']:.1f}%" if x["pass_rate"] is not None else "-"
        lines.append(f"| {name} | {x['modules']} | {x['passed']} | {x['failed']} | {x['skipped']} | {rate} |")
    lines += ["", f"Server: {'alive and answering' if s['alive'] else 'NOT RUNNING'} after {s['jobs']} jobs; "
              f"most jobs left attached after any job: {s['max_attached_after_job']}; device bytes held at the end: "
              f"{s['held_bytes_end']}; RSS {s['rss_start'] / 2**20:.0f} MiB at start, "
              f"{s['rss_end'] / 2**20:.0f} MiB at the end.", ""]
    for name, x in report["suites"].items():
        if x["causes"]:
            lines += [f"## {name}: failures by cause", "", "| tests | cause |", "|---|---|"]
            lines += [f"| {n} | `{c.replace('|', '/')}` |" for c, n in x["causes"]]
            lines.append("")
        if x["skip_reasons"]:
            lines += [f"## {name}: skips by reason", "", "| tests | reason |", "|---|---|"]
            lines += [f"| {n} | {c.replace('|', '/')} |" for c, n in x["skip_reasons"]]
            lines.append("")
    return "\n".join(lines)


def versions(python: Path) -> list[str]:
    code = ("import importlib.metadata as m\n"
            "for p in ('numba-cuda','numba','cuda-bindings','cuda-core','triton','torch','cupy-cuda13x',"
            "'nvidia-cuda-nvrtc'):\n"
            "  try: print(p + ' ' + m.version(p))\n  except m.PackageNotFoundError: pass")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return out.stdout.split("\n")[:-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, help="use this virtual environment (default: a throwaway one)")
    ap.add_argument("--suites", default="numba-cudadrv,numba-cudapy", help=f"comma-separated, of {', '.join(SUITES)}")
    ap.add_argument("--cuda-bindings-tests", type=Path, help="cuda-python's cuda_bindings/tests directory")
    ap.add_argument("--triton-tests", type=Path, help="a Triton checkout's python/test/unit directory")
    ap.add_argument("--per-function", type=int, default=5,
                    help="triton-core: cases of each test function, spread over its parameters (0: all; default 5)")
    ap.add_argument("--cupy-tests", type=Path, help="the root of a CuPy checkout (tests/, pyproject.toml)")
    ap.add_argument("--no-jit-capture", action="store_true", help="run the jobs with tally-run --no-jit-capture")
    ap.add_argument("--modules", help="only these module names (test_events,test_streams,...), or Triton test functions")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per module (default 900)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args(argv)
    suites = args.suites.split(",")
    if unknown := [s for s in suites if s not in SUITES]:
        ap.error(f"unknown suites {unknown}; known: {', '.join(SUITES)}")
    if "triton-core" in suites and not (args.triton_tests and (args.triton_tests / TRITON_CORE).is_file()):
        ap.error(f"triton-core: pass --triton-tests, a Triton checkout's python/test/unit directory (with "
                 f"{TRITON_CORE}; given: {args.triton_tests})")
    for suite, folder in CUPY_SUITES.items():
        if suite in suites and not (args.cupy_tests and (args.cupy_tests / folder).is_dir()):
            ap.error(f"{suite}: pass --cupy-tests, the root of a CuPy checkout (with {folder}; "
                     f"given: {args.cupy_tests})")
    work = Path(tempfile.mkdtemp(prefix="tally-peer-suites-"))
    try:
        venv = args.venv or make_venv(work / "venv")
        python = venv / "bin" / "python"
        only = set(args.modules.split(",")) if args.modules else set()
        chosen = modules(python, suites, args.cuda_bindings_tests, only,
                         args.cupy_tests.resolve() if args.cupy_tests else None)
        socket = work / "server.sock"
        server = start_server(socket, work / "server.log",
                              CUPY_SERVER if any(s in CUPY_SUITES for s in suites) else ())
        # Triton's and CuPy's kernels compile into caches of this run's and their records
        # into another: nothing found from earlier runs (a cubin cached by a run whose
        # records are gone would run whole), nothing left behind
        env = {**job_env(), "TRITON_CACHE_DIR": str(work / "triton-cache"), "CUPY_CACHE_DIR": str(work / "cupy-cache"),
               "XDG_CACHE_HOME": str(work / "cache")}
        run_flags = ("--no-jit-capture",) if args.no_jit_capture else ()
        rss_start, most_attached, alive = rss_bytes(server.pid), 0, True
        try:
            if "triton-core" in suites:
                chosen += triton_modules(python, socket, args.triton_tests.resolve(), args.per_function, env, only)
            for module in chosen:
                run_module(module, python, socket, work, args.timeout, env, run_flags)
                try:
                    module.attached_after = settle(socket)
                except (OSError, ConnectionError):     # no answer: hung or gone
                    alive = False
                most_attached = max(most_attached, module.attached_after)
                print(f"{module.suite} {module.label}: {module.passed} passed, {module.failed} failed, "
                      f"{module.skipped} skipped ({module.outcome}, {module.seconds} s)", file=sys.stderr, flush=True)
                if not alive or server.poll() is not None:
                    alive = False
                    print("tally-server stopped answering; the remaining modules are not run", file=sys.stderr)
                    break
            server_report = {"alive": alive and server.poll() is None, "jobs": len(chosen),
                             "max_attached_after_job": most_attached,
                             "held_bytes_end": held_bytes(socket) if alive else None,
                             "rss_start": rss_start, "rss_end": rss_bytes(server.pid)}
        finally:
            stop(server)
        report = summarize(chosen, server_report)
        report["versions"] = versions(python)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = markdown(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.md:
        args.md.write_text(text + "\n")
    return 0 if report["server"]["alive"] else 1


if __name__ == "__main__":
    sys.exit(main())
