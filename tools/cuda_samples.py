"""Build NVIDIA's cuda-samples and run them under tally on the CPU emulator: a
development check of "unmodified programs no one here wrote".

    python tools/cuda_samples.py SNAPSHOT [--samples a,b] [--timeout 300] [--out results.md]

SNAPSHOT is a checkout of github.com/NVIDIA/cuda-samples, or a bare git directory
of it (the samples' code is read from there, never copied into this project). Each
sample is built the way its CMakeLists.txt describes (its sources, the driver
library, OpenMP, the .fatbin/.ptx files a driver-API sample loads at run time),
with `nvcc -gencode arch=compute_80,code=compute_80` (PTX only, which the emulator
runs) and the samples' Common include directory, then run under tally-run against
a fresh emulator tally-server with a time limit. Prints a markdown table: sample,
build, result (pass / fail / timeout / waived), the first line saying what went
wrong.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tally import paths

# The 20 samples and a few more from 0_Introduction, 1_Utilities and
# 2_Concepts_and_Techniques that need no library beyond the CUDA driver and OpenMP.
DEFAULT_SAMPLES = (
    "vectorAdd", "vectorAddDrv", "matrixMul", "matrixMulDrv", "asyncAPI", "simpleAtomicIntrinsics",
    "simpleCallback", "simpleZeroCopy", "simpleOccupancy", "simpleTemplates", "cudaOpenMP",
    "simpleVoteIntrinsics", "simplePrintf", "simpleIPC", "threadFenceReduction", "reduction", "shfl_scan",
    "simpleAssert", "simpleCudaGraphs", "simpleStreams",
    "clock", "template", "simpleCooperativeGroups", "simpleDrvRuntime", "simpleHyperQ", "fp16ScalarProduct",
    "scalarProd", "deviceQuery", "deviceQueryDrv",
    # cooperative launches: a grid-wide reduction through grid.sync() (~45 s on the emulator)
    "reductionMultiBlockCG",
    # conditional graph nodes (IF/else, WHILE, SWITCH, capture into bodies)
    "graphConditionalNodes",
)
GENCODE = ("-gencode", "arch=compute_80,code=compute_80")
NVCC_FLAGS = ("-std=c++17", "--extended-lambda", "-Wno-deprecated-gpu-targets", "-O2")
# CMake link targets the build can satisfy, and what they become on nvcc's command line.
LINK_FLAGS = {
    # tally's libcuda.so.1, as a driver-API program links against the driver it will run with
    "CUDA::cuda_driver": [f"-L{paths.LIB_DIR}", "-lcuda"], "CUDA::cudart": [], "CUDA::cudart_static": [],
    "OpenMP::OpenMP_CXX": ["-Xcompiler", "-fopenmp", "-lgomp"],
    "CUDA::cublas": ["-lcublas"], "CUDA::cufft": ["-lcufft"], "CUDA::curand": ["-lcurand"],
    "CUDA::cusparse": ["-lcusparse"], "CUDA::cusolver": ["-lcusolver"],
    # the IPC samples' shared memory; `socket` is QNX's (their CMakeLists add it only there)
    "rt": ["-lrt"], "socket": [],
}
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
EXIT_WAIVED = 2          # what the samples return when they cannot run on this system
ERROR_WORDS = re.compile(r"error|fail|assert|abort|illegal|not supported|waived|exception", re.I)


@dataclass
class Result:
    sample: str
    built: bool | None = None     # None: not attempted
    result: str = "-"
    note: str = ""
    seconds: float = 0.0


@dataclass
class Sample:
    name: str
    directory: Path
    sources: list[Path] = field(default_factory=list)
    link: list[str] = field(default_factory=list)
    device_files: list[tuple[str, Path, str]] = field(default_factory=list)  # (output name, kernel source, -fatbin/-ptx)
    missing: list[str] = field(default_factory=list)  # link targets this tool cannot provide
    flags: list[str] = field(default_factory=list)    # nvcc flags its CMake target properties imply
    copied: list[Path] = field(default_factory=list)  # files its build copies beside the program


# ---- the snapshot ---------------------------------------------------------------------------

def checkout(snapshot: Path, work: Path) -> tuple[Path, str]:
    """A directory with Samples/ and Common/, and the commit it came from."""
    if (snapshot / "Samples").is_dir():
        rev = subprocess.run(["git", "-C", str(snapshot), "rev-parse", "HEAD"], capture_output=True, text=True)
        return snapshot, rev.stdout.strip() or "unknown"
    git = ["git", f"--git-dir={snapshot}"]
    rev = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    tree = work / "cuda-samples"
    if not (tree / ".commit").exists() or (tree / ".commit").read_text() != rev:
        listing = subprocess.run([*git, "ls-tree", "-r", "HEAD", "--", "Samples", "Common", "test_args.json"],
                                 capture_output=True, text=True, check=True).stdout
        entries = [(line.split()[2], line.split("\t", 1)[1]) for line in listing.splitlines()
                   if line.split()[1] == "blob"]
        batch = subprocess.run([*git, "cat-file", "--batch"], input="".join(f"{sha}\n" for sha, _ in entries).encode(),
                               capture_output=True, check=True).stdout
        at = 0
        for sha, path in entries:     # a snapshot may lack its largest blobs: "<sha> missing"
            header_end = batch.index(b"\n", at)
            header = batch[at:header_end].split()
            at = header_end + 1
            if header[-1] == b"missing":
                continue
            size = int(header[2])
            out = tree / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(batch[at:at + size])
            at += size + 1
        (tree / ".commit").write_text(rev)
    return tree, rev


def find_sample(tree: Path, name: str) -> Path | None:
    found = sorted(p for p in (tree / "Samples").glob(f"*/{name}") if (p / "CMakeLists.txt").exists())
    return found[0] if found else None


def read_cmake(name: str, directory: Path) -> Sample:
    """What the sample's CMakeLists.txt builds: sources, libraries, device-code files."""
    text = (directory / "CMakeLists.txt").read_text()
    sample = Sample(name, directory)
    exe = re.search(rf"add_executable\(\s*{re.escape(name)}\s+([^)]*)\)", text)
    if exe:
        sample.sources = [(directory / s).resolve() for s in exe.group(1).split()]
    for block in re.findall(r"target_link_libraries\(([^)]*)\)", text):
        for target in block.split()[1:]:
            if target in ("PUBLIC", "PRIVATE", "INTERFACE") or target.startswith("$<"):
                continue
            flags = nvrtc_flags() if target == "CUDA::nvrtc" else LINK_FLAGS.get(target)
            if flags is not None:
                sample.link += [f for f in flags if f not in sample.link]
            elif target not in sample.missing:
                sample.missing.append(target)
    # CMake's separable compilation is nvcc -rdc=true (the dynamic-parallelism samples need it)
    if re.search(r"CUDA_SEPARABLE_COMPILATION\s+ON", text):
        sample.flags.append("-rdc=true")
    # files copied beside the program after the build (the NVRTC samples' kernel sources)
    places = {"${CMAKE_CURRENT_SOURCE_DIR}": str(directory), "${CUDA_INCLUDE_DIR}": str(CUDA_HOME / "include")}
    for files in re.findall(r"copy_if_different\s+([^)]*?)\s+\$\{CMAKE_CURRENT_BINARY_DIR\}", text):
        for source in files.split():
            for name, value in places.items():
                source = source.replace(name, value)
            sample.copied.append(Path(source))
    variables = dict(re.findall(r'set\((CUDA_\w+)\s+"([^"]+)"\)', text))
    kernel = variables.get("CUDA_KERNEL_SOURCE", "").replace("${CMAKE_CURRENT_SOURCE_DIR}", str(directory))
    for var, flag in (("CUDA_FATBIN_FILE", "-fatbin"), ("CUDA_PTX_FILE", "-ptx")):
        if var in variables and kernel:
            sample.device_files.append((Path(variables[var]).name, Path(kernel), flag))
    return sample


def nvrtc_flags() -> list[str] | None:
    """nvcc's flags for CUDA::nvrtc: the toolkit's NVRTC, else the one of NVRTC's wheel
    (nvidia-cuda-nvrtc, which tally's test requirements install) with its folder in the
    program's DT_RPATH, where NVRTC also finds its libnvrtc-builtins. None: no NVRTC."""
    if (CUDA_HOME / "include" / "nvrtc.h").is_file():
        return ["-lnvrtc"]
    try:
        import nvidia
    except ImportError:
        return None
    for root in map(Path, nvidia.__path__):
        for home in sorted(root.glob("cu*"), reverse=True):
            libs = sorted((home / "lib").glob("libnvrtc.so.*"))
            if (home / "include" / "nvrtc.h").is_file() and libs:
                return [f"-I{home / 'include'}", f"-L{home / 'lib'}", f"-l:{libs[0].name}", "-Xlinker",
                        "--disable-new-dtags", "-Xlinker", f"-rpath={home / 'lib'}"]
    return None


# ---- building and running -------------------------------------------------------------------

def build(sample: Sample, common: Path, nvcc: str, out: Path) -> tuple[bool, str]:
    if not sample.sources:
        return False, "no add_executable() for it in CMakeLists.txt"
    if sample.missing:
        return False, f"needs {', '.join(sample.missing)}"
    out.mkdir(parents=True, exist_ok=True)
    commands = [[nvcc, *GENCODE, *NVCC_FLAGS, f"-I{common}", flag, str(kernel), "-o", str(out / name)]
                for name, kernel, flag in sample.device_files]
    commands.append([nvcc, *GENCODE, *NVCC_FLAGS, *sample.flags, f"-I{common}", *map(str, sample.sources), *sample.link,
                     "-o", str(out / sample.name)])
    for cmd in commands:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=sample.directory)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()
            return False, (lines[0] if lines else f"nvcc exited {done.returncode}")
    for source in sample.copied:
        shutil.copyfile(source, out / source.name)
    data = sample.directory / "data"
    if data.is_dir() and not (out / "data").exists():
        (out / "data").symlink_to(data)
    return True, ""


def job_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}


def start_server(socket: Path, log: Path, extra_args: tuple[str, ...] = ()) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "tally.cli.server_main", "--backend", "emulator",
                               "--socket", str(socket), *extra_args], stdout=log.open("w"), stderr=subprocess.STDOUT,
                              env=job_env())
    deadline = time.monotonic() + 60
    while not socket.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"tally-server did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return server


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def first_problem(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for wanted in (lambda l: l.startswith("tally:"), lambda l: ERROR_WORDS.search(l)):
        for line in lines:
            if wanted(line):
                return line
    return lines[-1] if lines else ""


def run(sample: Sample, out: Path, args: list[str], timeout: float, result: Result) -> None:
    socket = out / "server.sock"
    if socket.exists():
        socket.unlink()
    server = start_server(socket, out / "server.log")
    started = time.monotonic()
    job = subprocess.Popen([sys.executable, "-m", "tally.cli.run_main", "--server", str(socket), "--",
                            f"./{sample.name}", *args], cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, env=job_env(), start_new_session=True)
    try:
        output, _ = job.communicate(timeout=timeout)
        result.result = "pass" if job.returncode == 0 else "waived" if job.returncode == EXIT_WAIVED else "fail"
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, 9)     # tally-run and the sample: the group this tool started
        output, _ = job.communicate()
        result.result = "timeout"
    finally:
        result.seconds = time.monotonic() - started
        stop(server)
    (out / "output.txt").write_bytes(output)
    if result.result == "timeout":
        result.note = f"still running after {timeout:.0f} s"
    elif result.result != "pass":
        text = output.decode(errors="replace")
        result.note = first_problem(text) or f"exit status {job.returncode}"


def sample_args(tree: Path, name: str) -> list[str] | None:
    """Arguments NVIDIA's own test runner passes (test_args.json); None: it skips the sample."""
    path = tree / "test_args.json"
    entry = json.loads(path.read_text()).get(name, {}) if path.exists() else {}
    if entry.get("skip"):
        return None
    runs = entry.get("runs")
    return list(runs[0].get("args", [])) if runs else list(entry.get("args", []))


def markdown(results: list[Result]) -> str:
    rows = ["| sample | build | result | seconds | first line of the problem |", "|---|---|---|---|---|"]
    for r in results:
        note = r.note.replace("|", "\\|")[:200]
        built = "-" if r.built is None else "ok" if r.built else "failed"
        rows.append(f"| {r.sample} | {built} | {r.result} | "
                    f"{r.seconds:.1f} | {note} |")
    counts = {k: sum(r.result == k for r in results) for k in ("pass", "fail", "timeout", "waived")}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    return "\n".join(rows) + f"\n\n{summary} of {len(results)} samples.\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot", type=Path, help="cuda-samples checkout or bare git directory")
    ap.add_argument("--samples", help=f"comma-separated names (default: {len(DEFAULT_SAMPLES)} samples)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per sample run (default 300)")
    ap.add_argument("--work", type=Path, help="build directory (default: a temporary one, removed)")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    ap.add_argument("--nvcc", default=str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"))
    args = ap.parse_args(argv)
    if not args.snapshot.exists():
        ap.error(f"{args.snapshot} does not exist: pass a cuda-samples checkout or its bare git directory")
    if shutil.which(args.nvcc) is None:
        ap.error(f"no nvcc at {args.nvcc}: set CUDA_HOME or pass --nvcc")
    names = args.samples.split(",") if args.samples else list(DEFAULT_SAMPLES)
    work = args.work or Path(tempfile.mkdtemp(prefix="tally-cuda-samples-"))
    try:
        tree, commit = checkout(args.snapshot.resolve(), work)
        results = []
        for name in names:
            result = Result(name)
            results.append(result)
            directory = find_sample(tree, name)
            if directory is None:
                result.built, result.note = False, f"no sample named {name} in {tree / 'Samples'}"
                continue
            run_args = sample_args(tree, name)
            if run_args is None:
                result.result, result.note = "skipped", "NVIDIA's test_args.json skips it"
                continue
            sample = read_cmake(name, directory)
            out = work / "build" / name
            result.built, result.note = build(sample, tree / "Common", args.nvcc, out)
            if result.built:
                run(sample, out, run_args, args.timeout, result)
            print(f"{name}: build {'ok' if result.built else 'failed'}, {result.result} "
                  f"({result.seconds:.1f} s) {result.note}", file=sys.stderr, flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    nvcc_version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout.strip()
    table = (f"cuda-samples {commit}, built with `nvcc {' '.join(GENCODE)}` "
             f"({nvcc_version.splitlines()[-1] if nvcc_version else 'nvcc'}), run under tally-run on a fresh "
             f"emulator tally-server each, {args.timeout:.0f} s limit; {datetime.date.today().isoformat()}.\n\n"
             + markdown(results))
    print(table)
    if args.out:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
