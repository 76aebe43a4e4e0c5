"""Which CUDA driver entry points the libraries people run name, and which of them tally answers.

    python tools/driver_census.py                         # against this checkout's entry table
    python tools/driver_census.py --table 4109532         # against a git revision's table
    python tools/driver_census.py --before 4109532 --after main [--json]

Downloads (pip download --no-deps, from the configured package index) the CUDA 13 builds
of cuBLAS, cuDNN, NCCL, Triton, PyTorch and the CUDA runtime into a cache directory,
reads each wanted shared object straight out of its wheel, and collects the driver names
it holds as strings: these libraries dlopen libcuda and ask cuGetProcAddress (or dlsym)
for each entry point by name, so the names sit in .rodata (or .dynstr for the few linked
directly). Triton's launcher is C source in the wheel (compiled on the user's machine),
so its identifiers are read from the source instead.

A name is reduced to the base name cuGetProcAddress is asked for (cuMemAlloc_v2 and
cuMemcpyAsync_ptsz count as cuMemAlloc and cuMemcpyAsync) and looked up in tally's
generated entry table (client_preload/src/generated/entry_table.cpp):
implemented, NOT_SUPPORTED (in the table, refused), or unknown (absent: the client
answers SYMBOL_NOT_FOUND; also any string that only looks like a driver name).

Needs only the standard library and pyelftools; never imports tally.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE_PATH = "client_preload/src/generated/entry_table.cpp"
REASONS_PATH = "tools/unsupported_reasons.py"
DEFAULT_CACHE = Path.home() / ".cache" / "tally" / "census"

# The newest CUDA 13 build of each package in the registry on 2026-12-03. torch is pinned
# to 2.14.1 (built against CUDA 13.0): this machine's pip refuses 2.15.0 (a torch<=2.14.1
# constraint in its environment).
DEFAULT_VERSIONS = {
    "nvidia-cuda-runtime": "13.5.37",
    "nvidia-cublas": "13.10.0.20",
    "nvidia-cudnn-cu13": "9.27.0.42",
    "nvidia-nccl-cu13": "2.32.3",
    "triton": "3.9.0",
    "torch": "2.14.1",
}


@dataclass(frozen=True)
class Library:
    label: str
    package: str
    members: str        # regular expression over the wheel's member paths


LIBRARIES = (
    Library("libcudart", "nvidia-cuda-runtime", r".*/lib/libcudart\.so[.\d]*"),
    Library("libcublas", "nvidia-cublas", r".*/lib/libcublas\.so[.\d]*"),
    Library("libcublasLt", "nvidia-cublas", r".*/lib/libcublasLt\.so[.\d]*"),
    Library("cuDNN", "nvidia-cudnn-cu13", r".*/lib/libcudnn\w*\.so[.\d]*"),
    Library("libnccl", "nvidia-nccl-cu13", r".*/lib/libnccl\.so[.\d]*"),
    # driver.c is the launcher; driver.py loads it and calls a few entry points through it.
    Library("Triton launcher", "triton", r"triton/backends/nvidia/driver\.(c|py)"),
    Library("torch", "torch", r"torch/lib/(libtorch_cuda|libc10_cuda|libcaffe2_nvrtc)\.so"),
)

# --- names ------------------------------------------------------------------------------

# A whole C string in a binary: not preceded by a printable byte (so not the tail of a
# longer string or of a message such as "call to cuInit failed") and ended by its NUL.
# The one byte before is consumed so a match never starts at a chunk's first byte.
BINARY_NAME = re.compile(rb"[^\x20-\x7e](cu[A-Z][A-Za-z0-9_]+)(?=\x00)")
SOURCE_NAME = re.compile(r"\bcu[A-Z]\w+\b")
# Variants that cuGetProcAddress folds into one name (it is asked for the base name and a
# version, and for _ptsz/_ptds through the per-thread-stream flag).
VARIANT = re.compile(r"(_v\d+)?(_pt(sz|ds))?$")
CHUNK = 8 << 20
OVERLAP = 512           # longer than any entry-point name, so one cut by a chunk edge is whole in the next


def base_name(token: str) -> str:
    """cuMemcpyAsync_v2_ptsz -> cuMemcpyAsync: the name cuGetProcAddress is asked for."""
    return VARIANT.sub("", token)


def driver_names(tokens: set[str]) -> list[str]:
    """The base names of a library's tokens, less typedef names (NCCL's messages quote
    cuCtxGetCurrent_t and the like): those are types, never asked for."""
    return sorted({base_name(t) for t in tokens if not t.endswith("_t")})


def names_in_blob(stream, start: int = 0, length: int | None = None) -> set[str]:
    """Driver-looking C strings in a byte stream, read in chunks (binaries run to 500 MB)."""
    found: set[str] = set()
    tail = b""
    stream.seek(start)
    left = length
    while left is None or left > 0:
        chunk = stream.read(CHUNK if left is None else min(CHUNK, left))
        if not chunk:
            break
        if left is not None:
            left -= len(chunk)
        buf = tail + chunk
        found.update(m.group(1).decode() for m in BINARY_NAME.finditer(buf))
        tail = buf[-OVERLAP:]
    return found


def names_in_source(text: str) -> set[str]:
    """Identifiers in C or Python source, less the launcher's function-pointer variables
    (cuLaunchKernelExHandle): not entry points. Typedefs go in driver_names."""
    return {n for n in SOURCE_NAME.findall(text) if not n.endswith("Handle")}


def names_in_elf(path: Path) -> set[str]:
    """Strings of an ELF shared object's data sections: .rodata, .dynstr and the like.
    Code and the GPU fat binaries (most of cuBLASLt and cuDNN) are skipped: they hold no
    host-side names, and random bytes there could look like one."""
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile

    found: set[str] = set()
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for section in elf.iter_sections():
            if section["sh_type"] == "SHT_NOBITS" or section["sh_flags"] & SH_FLAGS.SHF_EXECINSTR:
                continue
            if "fatbin" in section.name or section["sh_size"] == 0:
                continue
            # From one byte before, so a name at the section's start has its delimiter.
            start = max(section["sh_offset"] - 1, 0)
            found |= names_in_blob(f, start, section["sh_offset"] + section["sh_size"] - start)
    return found


def names_in_member(wheel: zipfile.ZipFile, member: str, scratch: Path) -> set[str]:
    if member.endswith((".c", ".py")):
        return names_in_source(wheel.read(member).decode("utf-8", "replace"))
    # pyelftools needs to seek; a zip member only streams forward cheaply, so the one
    # shared object is copied out, read, and removed before the next.
    fd, tmp = tempfile.mkstemp(dir=scratch, suffix=".so")
    try:
        with os.fdopen(fd, "wb") as out, wheel.open(member) as src:
            shutil.copyfileobj(src, out, CHUNK)
        return names_in_elf(Path(tmp))
    finally:
        os.unlink(tmp)


# --- wheels -----------------------------------------------------------------------------

def wheel_for(package: str, version: str, cache: Path) -> Path:
    """The package's wheel in the cache, downloaded first if absent."""
    wheels = cache / "wheels"
    prefix = f"{re.sub(r'[-.]', '_', package)}-{version}-"
    hits = sorted(wheels.glob(prefix + "*.whl"))
    if not hits:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--progress-bar", "off", "-d", str(wheels), f"{package}=={version}"],
                       check=True, stdout=sys.stderr)
        hits = sorted(wheels.glob(prefix + "*.whl"))
        if not hits:
            raise SystemExit(f"pip download {package}=={version} left no {prefix}*.whl in {wheels}")
    return hits[0]


@dataclass
class Scan:
    library: Library
    wheel: str
    version: str
    files: list[str]
    tokens: set[str] = field(default_factory=set)     # as found, before base_name


def scan_libraries(versions: dict[str, str], cache: Path) -> list[Scan]:
    """Every library's tokens, remembered in the cache per wheel member (reading 3 GB of
    shared objects takes minutes; a second census with another table should not)."""
    memo_path = cache / "names.json"
    memo = json.loads(memo_path.read_text()) if memo_path.exists() else {}
    scratch = cache / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    scans = []
    for lib in LIBRARIES:
        wheel_path = wheel_for(lib.package, versions[lib.package], cache)
        scan = Scan(lib, wheel_path.name, versions[lib.package], [])
        with zipfile.ZipFile(wheel_path) as wheel:
            for member in sorted(n for n in wheel.namelist() if re.fullmatch(lib.members, n)):
                key = f"{wheel_path.name}:{member}"
                if key not in memo:
                    print(f"reading {key}", file=sys.stderr)
                    memo[key] = sorted(names_in_member(wheel, member, scratch))
                    memo_path.write_text(json.dumps(memo, indent=0))
                scan.files.append(member.rsplit("/", 1)[-1])
                scan.tokens.update(memo[key])
        if not scan.files:
            raise SystemExit(f"{wheel_path.name} has no member matching {lib.members}")
        scans.append(scan)
    return scans


# --- tally's table ----------------------------------------------------------------------

ROW = re.compile(r'^\s*\{"(cu\w+)", (\d+), (true|false), (true|false), "(\w+)"', re.M)


@dataclass(frozen=True)
class Row:
    name: str           # the name cuGetProcAddress is asked for
    version: int
    per_thread: bool
    implemented: bool
    symbol: str


def parse_table(text: str) -> list[Row]:
    rows = [Row(m[1], int(m[2]), m[3] == "true", m[4] == "true", m[5]) for m in ROW.finditer(text)]
    if not rows:
        raise ValueError("no entry rows found: not a generated entry_table.cpp?")
    return rows


def git_show(rev: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def load_table(spec: str | None) -> tuple[str, str]:
    """(label, text) of a table given as a file path, a git revision, or None (this checkout)."""
    if spec is None:
        return "working tree", (REPO / TABLE_PATH).read_text()
    if Path(spec).is_file():
        return spec, Path(spec).read_text()
    text = git_show(spec, TABLE_PATH)
    if text is None:
        raise SystemExit(f"{spec} is neither a file nor a git revision with {TABLE_PATH}")
    short = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", spec],
                           capture_output=True, text=True).stdout.strip()
    return (f"{spec} ({short})" if short and short != spec else spec), text


def load_reasons(spec: str | None):
    """That revision's tools/unsupported_reasons.reason_for, where it has one (it is plain
    Python, run in a module of its own), else None; for a table given as a file, this
    checkout's."""
    text = (REPO / REASONS_PATH).read_text() if spec is None or Path(spec).is_file() else git_show(spec, REASONS_PATH)
    if not text:
        return None
    # A module of its own per revision; dataclasses look their module up in sys.modules.
    module = types.ModuleType(f"_census_reasons_{len(sys.modules)}")
    sys.modules[module.__name__] = module
    exec(compile(text, REASONS_PATH, "exec"), module.__dict__)
    return getattr(module, "reason_for", None)


class Table:
    def __init__(self, rows: list[Row], reason_for=None):
        self.by_name: dict[str, list[Row]] = {}
        for row in rows:
            self.by_name.setdefault(row.name, []).append(row)
        self.reason_for = reason_for

    def served(self, name: str) -> Row | None:
        """The row a CUDA 13 library gets: the newest version, default-stream form
        (cuGetProcAddress hands out the newest version not above the caller's)."""
        rows = self.by_name.get(name)
        if not rows:
            return None
        plain = [r for r in rows if not r.per_thread] or rows
        return max(plain, key=lambda r: r.version)

    def status(self, name: str) -> str:
        row = self.served(name)
        if row is None:
            return "unknown"
        return "implemented" if row.implemented else "NOT_SUPPORTED"

    def reason(self, name: str) -> str | None:
        row = self.served(name)
        if row is None or row.implemented or self.reason_for is None:
            return None
        implemented = [r.version for r in self.by_name[name] if r.implemented]
        return self.reason_for(name, row.version, max(implemented) if implemented else None)


def compare(tokens: set[str], table: Table, declared: set[str] | None = None) -> dict:
    """Counts and names of one library's driver names against one table. With the names
    CUDA's headers declare, the unknown ones are split: a public entry point tally's table
    lacks, or a name in no header (a private entry point the runtime asks for, or a string
    that only looks like one, such as "cuBLAS")."""
    named = driver_names(tokens)
    by_status: dict[str, list[str]] = {"implemented": [], "NOT_SUPPORTED": [], "unknown": []}
    for name in named:
        by_status[table.status(name)].append(name)
    unknown = by_status["unknown"]
    return {"named": len(named), **{k: len(v) for k, v in by_status.items()},
            "not_supported_names": by_status["NOT_SUPPORTED"], "unknown_names": unknown,
            "unknown_undeclared": [] if declared is None else [n for n in unknown if n not in declared],
            "reasons": {n: table.reason(n) for n in by_status["NOT_SUPPORTED"] if table.reason(n)}}


# The typedef headers name every public entry point (graphics interop included, which
# tally's table leaves out) as PFN_<name>_v<version>; cuda.h declares the rest.
PFN = re.compile(r"\bPFN_(cu\w+?)_v\d+(?:_pt(?:sz|ds))?\b")
DECLARATION = re.compile(r"CUresult CUDAAPI (cu\w+)\s*\(")


def declared_names(cudart_wheel: Path) -> set[str]:
    """The driver entry points declared by the headers in the CUDA runtime's wheel."""
    names: set[str] = set()
    with zipfile.ZipFile(cudart_wheel) as wheel:
        for member in wheel.namelist():
            if re.fullmatch(r".*/include/(cuda\w*Typedefs|cuda)\.h", member):
                text = wheel.read(member).decode("utf-8", "replace")
                names.update(PFN.findall(text))
                names.update(base_name(n) for n in DECLARATION.findall(text))
    return names


# --- report -----------------------------------------------------------------------------

def library_title(scan: Scan) -> str:
    if len(scan.files) > 1:
        return f"{scan.library.label} ({len(scan.files)} files)"
    return scan.library.label


def markdown(scans: list[Scan], results: list[dict[str, dict]], labels: list[str]) -> str:
    """One table (a column group per table compared), then each library's refused and unknown names."""
    lines = []
    if len(labels) == 1:
        lines += ["| library | package | named | implemented | NOT_SUPPORTED | unknown |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for scan, res in zip(scans, results):
            r = res[labels[0]]
            lines.append(f"| {library_title(scan)} | {scan.library.package} {scan.version} "
                         f"| {r['named']} | {r['implemented']} | {r['NOT_SUPPORTED']} | {r['unknown']} |")
    else:
        before, after = labels
        lines += [f"Columns: before = `{before}`, after = `{after}`.", "",
                  "| library | package | named | implemented before | implemented after | NOT_SUPPORTED before "
                  "| NOT_SUPPORTED after | unknown before | unknown after |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for scan, res in zip(scans, results):
            b, a = res[before], res[after]
            lines.append(f"| {library_title(scan)} | {scan.library.package} {scan.version} "
                         f"| {a['named']} | {b['implemented']} | {a['implemented']} | {b['NOT_SUPPORTED']} "
                         f"| {a['NOT_SUPPORTED']} | {b['unknown']} | {a['unknown']} |")
    last = labels[-1]
    for scan, res in zip(scans, results):
        r = res[last]
        lines += ["", f"### {library_title(scan)}", "", f"Files: {', '.join(scan.files)}.", ""]
        if len(labels) == 2:
            newly = sorted(set(res[labels[0]]["not_supported_names"]) | set(res[labels[0]]["unknown_names"]))
            newly = [n for n in newly if n not in r["not_supported_names"] and n not in r["unknown_names"]]
            lines.append(f"Implemented since `{labels[0]}` ({len(newly)}): {', '.join(newly) or 'none'}.")
            lines.append("")
        lines.append(f"NOT_SUPPORTED at `{last}` ({len(r['not_supported_names'])}):")
        lines.append("")
        for name in r["not_supported_names"]:
            why = r["reasons"].get(name)
            lines.append(f"- {name}" + (f": {why}" if why else ""))
        if not r["not_supported_names"]:
            lines.append("- none")
        public = [n for n in r["unknown_names"] if n not in r["unknown_undeclared"]]
        lines += ["", f"Unknown at `{last}` ({len(r['unknown_names'])}): declared in CUDA's headers "
                  f"({len(public)}): {', '.join(public) or 'none'}; in no header ({len(r['unknown_undeclared'])}): "
                  f"{', '.join(r['unknown_undeclared']) or 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", help="entry table: a file path or a git revision (default: this checkout's)")
    ap.add_argument("--before", help="with --after: two tables side by side (paths or revisions)")
    ap.add_argument("--after")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"wheel cache (default {DEFAULT_CACHE})")
    ap.add_argument("--pin", action="append", default=[], metavar="PACKAGE==VERSION",
                    help="another version of one package (repeatable)")
    ap.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    args = ap.parse_args(argv)
    if (args.before is None) != (args.after is None):
        ap.error("--before and --after go together")
    versions = dict(DEFAULT_VERSIONS)
    for pin in args.pin:
        package, _, version = pin.partition("==")
        if package not in versions or not version:
            ap.error(f"--pin {pin}: expected one of {', '.join(versions)} as NAME==VERSION")
        versions[package] = version

    specs = [args.before, args.after] if args.before else [args.table]
    tables = {}
    for spec in specs:
        label, text = load_table(spec)
        tables[label] = Table(parse_table(text), load_reasons(spec))
    scans = scan_libraries(versions, args.cache)
    declared = declared_names(wheel_for("nvidia-cuda-runtime", versions["nvidia-cuda-runtime"], args.cache))
    results = [{label: compare(scan.tokens, table, declared) for label, table in tables.items()} for scan in scans]
    if args.json:
        print(json.dumps({"tables": list(tables), "versions": versions,
                          "libraries": [{"library": s.library.label, "package": s.library.package,
                                         "version": s.version, "wheel": s.wheel, "files": s.files,
                                         "by_table": r} for s, r in zip(scans, results)]}, indent=1))
    else:
        print(markdown(scans, results, list(tables)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
