"""What relocating a module's variables (ptx_passes/passes/relocate_globals.py,
applied by the cuda backend with --suspendable) does to the machine code ptxas
makes of each kernel, measured without a GPU: SASS instructions (the size of
the kernel's .text section, 16 bytes an instruction from sm_70 on, without the
NOPs that pad it), the global loads among them (LDG: the opcode field of the
sm_90 encoding, 0x981) and registers (ptxas -v), original against relocated.

    python bench/relocation_cost.py [--arch sm_90] [--markdown out.md] FILE.cu...

Time on a GPU: tests/test_e2e_gpu_mobility.py::test_what_relocated_variables_cost_kernels.
"""
from __future__ import annotations

import argparse
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ptx_passes.elf_sections import ElfImage  # noqa: E402
from tally.backends.relocated_globals import relocate  # noqa: E402

INSTRUCTION_BYTES = 16
NOP, LDG = 0x918, 0x981        # low 12 bits of an sm_90 instruction's first word


def counts(code: bytes) -> tuple[int, int]:
    """(instructions without the trailing NOP padding, LDG instructions) of a kernel's code."""
    opcodes = [struct.unpack_from("<Q", code, i)[0] & 0xFFF for i in range(0, len(code), INSTRUCTION_BYTES)]
    while opcodes and opcodes[-1] == NOP:
        opcodes.pop()
    return len(opcodes), opcodes.count(LDG)


def ptxas(ptx: str, arch: str, work: Path, name: str) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """(kernel -> (SASS instructions, LDGs), kernel -> ptxas -v's resource line)."""
    source, cubin = work / f"{name}.ptx", work / f"{name}.cubin"
    source.write_text(ptx)
    done = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(source), "-o", str(cubin)], capture_output=True,
                          text=True, check=True)
    raw = cubin.read_bytes()
    image = ElfImage(raw, RuntimeError, name)
    sizes = {s.name[len(".text."):]: counts(raw[s.offset:s.offset + s.size]) for s in image.sections
             if s.name.startswith(".text.")}
    usage, current = {}, None
    for line in done.stderr.splitlines():
        found = re.search(r"Compiling entry function '([^']+)'", line) or re.search(r"Function properties for (\S+)",
                                                                                    line)
        if found:
            current = found.group(1)
        elif "Used" in line and current is not None:
            usage[current] = line.split("info    :", 1)[-1].strip()
    return sizes, usage


def measure(cu: Path, arch: str, work: Path) -> list[tuple]:
    ptx = subprocess.run(["nvcc", f"-arch={arch}", "--ptx", str(cu), "-o", "-"], capture_output=True, text=True,
                         check=True).stdout
    relocated = relocate(ptx)
    if relocated is None:
        return []
    before, usage_before = ptxas(ptx, arch, work, cu.stem)
    after, usage_after = ptxas(relocated.ptx, arch, work, cu.stem + "_relocated")
    return [(f"{cu.name}:{kernel}", *before[kernel], *after[kernel], _registers(usage_before.get(kernel, "")),
             _registers(usage_after.get(kernel, ""))) for kernel in sorted(before)]


def _registers(usage: str) -> str:
    found = re.search(r"Used (\d+) registers", usage)
    return found.group(1) if found else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for cu in args.files:
            rows += measure(cu, args.arch, Path(work))
    lines = [f"| kernel ({args.arch}, .text.* functions) | SASS instructions | relocated | LDG | relocated | "
             f"registers | relocated |", "|---|---|---|---|---|---|---|"]
    for kernel, before, ldg_before, after, ldg_after, regs_before, regs_after in rows:
        lines.append(f"| {kernel} | {before} | {after} ({after - before:+d}) | {ldg_before} | {ldg_after} | "
                     f"{regs_before} | {regs_after} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
