"""tally-nvlink: the device linker nvcc runs under tally-run.

Separate compilation (`nvcc -dc`, then `nvcc --device-link`) makes cubins no
assembler wrote: nvcc's ptxas (tally-ptxas) assembles each translation unit into a
relocatable cubin, and records its PTX, but the cubin the job loads is the one
nvlink links from those (CuPy's NVCC backend does this for kernels that launch
kernels or use cooperative groups). This wrapper runs the real nvlink with its
command line unchanged (same inputs, output, exit status and messages), then
links the PTX behind the inputs with tally's own linker (the one cuLink* uses:
tally/server/client/linker.py) and records the result keyed by nvlink's cubin, the
way tally-ptxas records an assembler's.

The PTX of an input, for the link's architecture (`--arch sm_XY`):
- a host object, fatbin or cubin: each relocatable cubin for that architecture by
  its record (what tally-ptxas stored when nvcc -dc assembled it); an input without
  such records contributes the PTX it carries (the newest not newer than the
  architecture), as cuLinkAddData takes it;
- a static library (`-l`/`-L`, or an archive named as an input; nvcc adds
  libcudadevrt to every device link): its members, each linked only where the
  program needs it, as the linker takes libraries (records of members are not
  looked up).
Nothing is recorded when an input has no PTX to give, when the link is not one
that ends in a loadable cubin (link-time optimization's NVVM IR, a relocatable
link, PTX output, options read from a file), or when the linked PTX's kernels are
not the cubin's (ptx_match.mismatch, the server's own check). The job's link never
fails because of tally; TALLY_JIT_DEBUG=1 prints why a link was not recorded.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tally.jit import records
from tally.jit.ptxas_wrapper import real_tool, run_then_record

REAL_BESIDE = "real-nvlink"     # beside the name we run under (job_env.py's CUDA root)
CUDA_NVLINK = Path("/usr/local/cuda/bin/nvlink")
AR_MAGIC = b"!<arch>\n"

# nvlink's options that take a value (`--opt value`, `--opt=value`, or `-lx`/`-Lx` attached)
VALUED = {
    "-o", "--output-file", "-arch", "--arch", "-cpu-arch", "--cpu-arch", "-l", "--library", "-L",
    "--library-path", "-m", "--machine", "-maxrregcount", "--maxrregcount", "-optf", "--options-file",
    "--register-link-binaries", "-time", "--time", "-Xptxas", "--Xptxas", "-Xnvvm", "--Xnvvm", "-Ofc",
    "--Ofast-compile", "-ghls", "--gen-host-linker-script", "-kernels-used", "--kernels-used",
    "-variables-used", "--variables-used", "-split-compile", "--split-compile", "-split-compile-extended",
    "--split-compile-extended", "--host-ccbin", "-ccbin", "-nvvmpath", "--nvvmpath", "-uidx", "--uidx-file",
}
# links whose output is no cubin loaded as it is, or whose inputs this wrapper cannot see
UNRECORDED = {
    "-lto": "link-time optimization (its inputs are NVVM IR)", "--link-time-opt": "link-time optimization",
    "-dlto": "link-time optimization (its inputs are NVVM IR)", "--dlto": "link-time optimization",
    "-r": "a relocatable link", "--relocatable-link": "a relocatable link",
    "-emit-ptx": "PTX output", "--emit-ptx": "PTX output",
    "-optf": "options read from a file", "--options-file": "options read from a file",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_then_record("nvlink", real_tool("nvlink", REAL_BESIDE, CUDA_NVLINK), args, record,
                           "put the CUDA toolkit's nvlink on PATH")


@dataclass
class LinkLine:
    """What an nvlink command line links."""

    inputs: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    library_paths: list[str] = field(default_factory=list)
    output: str | None = None
    arch: str | None = None
    unrecorded: str = ""          # why a link of this kind is not recorded ("" when it may be)


def read_command_line(args: list[str]) -> LinkLine:
    line = LinkLine()
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if not a.startswith("-"):
            line.inputs.append(a)
            continue
        if a in UNRECORDED:                 # before the attached forms: -lto is no -l
            line.unrecorded = line.unrecorded or UNRECORDED[a]
            continue
        name, eq, value = a.partition("=")
        if not eq and name in VALUED:
            if i >= len(args):
                break
            value = args[i]
            i += 1
        elif not eq and a[:2] in ("-l", "-L") and len(a) > 2:
            name, value = a[:2], a[2:]
        line.unrecorded = line.unrecorded or UNRECORDED.get(name, "")
        if name in ("-o", "--output-file"):
            line.output = value
        elif name in ("-arch", "--arch"):
            line.arch = value
        elif name in ("-l", "--library"):
            line.libraries += [v for v in value.split(",") if v]
        elif name in ("-L", "--library-path"):
            line.library_paths += [v for v in value.split(",") if v]
    return line


def compute_capability(arch: str | None) -> tuple[int, int] | None:
    """(9, 0) for sm_90 and sm_90a, (12, 1) for sm_121; None for anything else."""
    m = re.fullmatch(r"sm_(\d+)(\d)[af]?", arch or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def record(args: list[str]) -> str:
    """Store the PTX of the cubin this nvlink command line made; why not ("" when stored)."""
    directory = os.environ.get(records.DIR_ENV)
    if not directory:
        return "no record folder (TALLY_JIT_CAPTURE_DIR) is named"
    line = read_command_line(args)
    if line.unrecorded:
        return f"the link is {line.unrecorded}"
    cc = compute_capability(line.arch)
    if cc is None or line.output is None:
        return f"the command line names no output or no sm_XY architecture (--arch {line.arch})"
    cubin = Path(line.output).read_bytes()
    if cubin[:4] != b"\x7fELF":
        return f"{line.output} is not a cubin"
    ptx, why = linked_ptx(line, cc)
    if ptx is None:
        return why
    # imported here: the linker and the PTX parser are needed only once a link succeeded
    from tally.jit.ptx_match import mismatch
    why = mismatch(ptx, cubin)
    if why:
        return why
    stored = records.store(Path(directory), cubin, ptx, "nvlink", records.max_bytes())
    return "" if stored is not None else "the record is over the cache's size bound"


def linked_ptx(line: LinkLine, cc: tuple[int, int]) -> tuple[str | None, str]:
    """(the link's inputs' PTX linked as one module, "") or (None, why not)."""
    from tally.protocol.errors import DeviceError
    from tally.server.client.linker import INPUT_LIBRARY, INPUT_OBJECT, INPUT_PTX, LinkState

    state = LinkState()
    try:
        for path in line.inputs:
            data = Path(path).read_bytes()
            if data.startswith(AR_MAGIC):
                state.add(path, INPUT_LIBRARY, data, cc)
                continue
            recorded = recorded_ptx(data, cc)
            if recorded:
                for i, text in enumerate(recorded):
                    state.add(f"{path}[{i}]", INPUT_PTX, text.encode(), cc)
            else:
                state.add(path, INPUT_OBJECT, data, cc)
        for name in line.libraries:
            found = find_library(name, line.library_paths)
            if found is None:
                return None, f"library {name} is not found on the link's -L paths"
            state.add(str(found), INPUT_LIBRARY, found.read_bytes(), cc)
    except DeviceError as e:
        return None, e.message
    result = state.complete(verbose=False)
    if result.error_log:
        return None, f"tally's linker did not link the inputs' PTX: {result.error_log}"
    return result.image.rstrip(b"\0").decode(), ""


def recorded_ptx(data: bytes, cc: tuple[int, int]) -> list[str]:
    """The recorded PTX of each relocatable cubin for `cc` in an input; [] unless every
    one of them has a record whose SHA-256 is the cubin's."""
    import hashlib

    from ptx_passes.fatbin import FatbinError, read_fatbin_entries

    directory = Path(os.environ[records.DIR_ENV])
    try:
        entries = read_fatbin_entries(data)
    except FatbinError:
        return []
    arch = cc[0] * 10 + cc[1]
    found = []
    for entry in entries:
        if entry.kind != "cubin" or entry.arch != arch:
            continue
        raw = records.lookup(directory, entry.payload)
        try:
            rec = records.decode(raw) if raw is not None else None
        except records.RecordError:
            rec = None
        if rec is None or rec.cubin_sha256 != hashlib.sha256(entry.payload).hexdigest():
            return []
        found.append(rec.ptx)
    return found


def find_library(name: str, paths: list[str]) -> Path | None:
    """`-lname` as nvlink finds it: lib<name>.a on the -L paths, in order."""
    for d in paths:
        candidate = Path(d) / f"lib{name}.a"
        if candidate.is_file():
            return candidate
    return None


if __name__ == "__main__":
    sys.exit(main())
