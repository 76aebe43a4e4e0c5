#!/usr/bin/env python3
"""Sweep real compilers' PTX through tally's parser and the emulator's lowering,
and count what the emulator cannot run.

    python tools/ptx_sweep.py --samples ~/cuda-samples --cub --numba --markdown out.md
    python tools/ptx_sweep.py --ptx some.ptx other.ptx

Sources:
- --samples DIR: every .cu under DIR/Samples (NVIDIA's cuda-samples), compiled
  with `nvcc -ptx -arch=<--arch>` (-I DIR/Common and the file's folder);
- --cub: the CUB/Thrust programs in tools/ptx_sweep_programs/ (same nvcc);
- --numba: numba-cuda kernels (tools/ptx_sweep_numba.py) through
  numba.cuda.compile_ptx (needs `pip install numba-cuda` and CUDA_HOME);
- --ptx FILES: PTX files as they are.
Compiled PTX is cached under --cache (default <tmp>/tally-ptx-sweep), keyed by the
source text and the command.

Each module is parsed (ptx_passes) and each kernel lowered (tally/backends/emulator) with
unsupported instructions collected rather than fatal, so one kernel reports all
it lacks. The table counts each construct by kernels and modules and names
where it was seen; sources nvcc cannot compile here (no OpenGL, MPI, ...) are
listed apart. Exit status 0 (a report, not a check).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = Path(__file__).resolve().parent / "ptx_sweep_programs"
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


@dataclass
class Module:
    origin: str            # e.g. samples/2_Concepts_and_Techniques/reduction/reduction_kernel.cu
    ptx: str | None
    error: str = ""        # why there is no PTX (compile failure)


@dataclass
class Report:
    modules: int = 0
    kernels: int = 0
    clean_kernels: int = 0
    compile_failures: list[tuple[str, str]] = field(default_factory=list)
    parse_failures: list[tuple[str, str]] = field(default_factory=list)
    # construct -> (kernel count, set of modules, examples "module: kernel, PTX line")
    constructs: dict[str, list] = field(default_factory=dict)

    def add(self, construct: str, module: str, kernel: str, line: int) -> None:
        entry = self.constructs.setdefault(construct, [0, set(), []])
        entry[0] += 1
        entry[1].add(module)
        if len(entry[2]) < 3 and all(not e.startswith(module + ":") for e in entry[2]):
            entry[2].append(f"{module}: {demangled(kernel)} (line {line})")


# ------------------------------------------------------------------ sources


def nvcc_ptx(source: Path, arch: str, includes: list[Path], cache: Path) -> Module:
    cmd = [str(CUDA_HOME / "bin" / "nvcc"), "-ptx", f"-arch={arch}", "-std=c++17", "--expt-relaxed-constexpr",
           "--extended-lambda", *(f"-I{i}" for i in includes), str(source), "-o"]
    key = hashlib.sha256("\0".join(cmd).encode() + source.read_bytes()).hexdigest()[:24]
    out = cache / f"{source.stem}-{key}.ptx"
    failed = out.with_suffix(".failed")
    if out.exists():
        return Module(str(source), out.read_text())
    if failed.exists():
        return Module(str(source), None, failed.read_text())
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    r = subprocess.run(cmd + [str(tmp)], capture_output=True, text=True, check=False)
    if r.returncode != 0 and "separate compilation" in r.stderr:   # dynamic parallelism needs -rdc
        r = subprocess.run(cmd[:1] + ["-rdc=true"] + cmd[1:] + [str(tmp)], capture_output=True, text=True,
                           check=False)
    if r.returncode != 0:
        first = next((line for line in r.stderr.splitlines() if "error" in line), r.stderr.strip()[:200])
        failed.write_text(first.strip())
        return Module(str(source), None, first.strip())
    tmp.replace(out)
    return Module(str(source), out.read_text())


def compile_all(sources: list[tuple[Path, list[Path]]], arch: str, cache: Path, jobs: int) -> list[Module]:
    cache.mkdir(parents=True, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda s: nvcc_ptx(s[0], arch, s[1], cache), sources))


def sample_sources(root: Path) -> list[tuple[Path, list[Path]]]:
    return [(cu, [root / "Common", cu.parent]) for cu in sorted((root / "Samples").rglob("*.cu"))]


def numba_modules() -> list[Module]:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import ptx_sweep_numba
    except ImportError as e:
        return [Module("numba", None, f"numba-cuda is not installed ({e}): pip install numba-cuda")]
    return [Module(f"numba/{name}", ptx) if ptx else Module(f"numba/{name}", None, error)
            for name, ptx, error in ptx_sweep_numba.compile_all()]


# ------------------------------------------------------------------ analysis


def analyse(module: Module, report: Report, short: str) -> None:
    from ptx_passes import PtxParseError, parse_module
    from tally._core import emulator as core
    from tally.backends.base import ModuleSource
    from tally.protocol.errors import DeviceError
    from tally.backends.emulator.lowering import LoweringError, lower_kernel
    from tally.backends.emulator.module import EmulatorModule

    report.modules += 1
    try:
        parse_module(module.ptx, short)
    except PtxParseError as e:
        report.parse_failures.append((short, str(e)[:300]))
        return
    memory = core.DeviceMemory(1 << 34)
    try:
        loaded = EmulatorModule(ModuleSource(original=b"", ptx=module.ptx), memory)
    except DeviceError as e:
        report.parse_failures.append((short, e.message[:300]))
        return
    for name in loaded.functions:
        report.kernels += 1
        found: list[LoweringError] = []
        try:
            lower_kernel(loaded.ir, name, loaded.addresses, collect=found)
        except LoweringError as e:
            found.append(e)
        first_line: dict[str, int] = {}
        for e in found:
            first_line.setdefault(normalize(e.construct), e.line)
        for construct, line in first_line.items():
            report.add(construct, short, name, line)
        report.clean_kernels += not found
    loaded.unload()


def normalize(construct: str) -> str:
    """One key per kind of construct: registers, numbers and names that vary are elided."""
    construct = re.sub(r" in [\w$.]+$", "", construct)
    if not construct.startswith("the special register"):
        construct = re.sub(r"%[\w$]+", "%r", construct)
    construct = re.sub(r"\(\w+Error: .*\)$", "(bad operands)", construct)
    construct = re.sub(r"\bparam\w*", "PARAM", construct)
    construct = re.sub(r" \(built in: [^)]*\)", "", construct)
    return construct


def demangled(name: str) -> str:
    if not name.startswith("_Z"):
        return name
    r = subprocess.run(["c++filt", name], capture_output=True, text=True, check=False)
    text = r.stdout.strip() or name
    return text if len(text) < 90 else text[:87] + "..."


# ------------------------------------------------------------------ output


def table(report: Report) -> str:
    lines = [f"{report.modules} modules, {report.kernels} kernels: {report.clean_kernels} lower completely, "
             f"{report.kernels - report.clean_kernels} use something the emulator lacks", "",
             "| construct | kernels | modules | where seen |", "|---|---|---|---|"]
    ranked = sorted(report.constructs.items(), key=lambda kv: (-kv[1][0], kv[0]))
    for construct, (kernels, modules, examples) in ranked:
        text = construct.replace("|", "\\|")
        lines.append(f"| {text} | {kernels} | {len(modules)} | {'; '.join(examples).replace('|', '/')} |")
    if report.parse_failures:
        lines += ["", "Modules that do not parse or load:", ""]
        lines += [f"- {m}: {why}" for m, why in report.parse_failures]
    if report.compile_failures:
        lines += ["", f"Sources nvcc could not compile here ({len(report.compile_failures)}):", ""]
        lines += [f"- {m}: {why}" for m, why in report.compile_failures]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=Path, help="a checkout of NVIDIA's cuda-samples")
    p.add_argument("--cub", action="store_true", help="the CUB/Thrust programs in tools/ptx_sweep_programs/")
    p.add_argument("--numba", action="store_true", help="numba-cuda kernels (tools/ptx_sweep_numba.py)")
    p.add_argument("--ptx", type=Path, nargs="*", default=[], help="PTX files")
    p.add_argument("--arch", default="compute_80", help="nvcc -arch for .cu sources (default compute_80)")
    p.add_argument("--jobs", type=int, default=2, help="nvcc processes at once")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / f"tally-ptx-sweep-{os.getuid()}")
    p.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)

    modules: list[tuple[str, Module]] = []
    if args.samples:
        for m in compile_all(sample_sources(args.samples), args.arch, args.cache, args.jobs):
            modules.append(("samples/" + str(Path(m.origin).relative_to(args.samples / "Samples")), m))
    if args.cub:
        cub = [(cu, [PROGRAMS]) for cu in sorted(PROGRAMS.glob("*.cu"))]
        for m in compile_all(cub, args.arch, args.cache, args.jobs):
            modules.append(("cub-thrust/" + Path(m.origin).name, m))
    if args.numba:
        modules += [(m.origin, m) for m in numba_modules()]
    modules += [(f"ptx/{path.name}", Module(str(path), path.read_text())) for path in args.ptx]

    report = Report()
    for short, module in modules:
        if module.ptx is None:
            report.compile_failures.append((short, module.error))
        else:
            analyse(module, report, short)
    text = table(report)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
