"""A job's link states for the JIT linker (cuLinkCreate/AddData/AddFile/Complete/Destroy).

Why the server links, not the client: linking PTX means parsing it, resolving
symbols across modules and printing the result, which is what ptx_passes (the
parser, IR and printer the server already runs for every module it loads) does;
the inputs may be fatbins or host objects that need the fatbin reader and the
device's compute capability to pick their PTX, both of which live here too. The
client keeps only what the application sees (option pointers, log buffers, the
image it hands back). The linked image is NUL-terminated PTX: cuModuleLoadData
and cuLibraryLoadData accept it like any other PTX, on every backend (the cuda
backend's driver JIT-compiles it, the emulator runs it).

Each input is read when it is added (as the driver compiles PTX at cuLinkAddData),
so a bad input fails there with a message; cuLinkComplete links what was added
and answers with a LinkReply whose status and logs the client passes on.

A static library (CU_JIT_INPUT_LIBRARY: an ar archive such as libcudadevrt.a) adds
each member (PTX, fatbin, host object) as an input the link takes only if it
defines something the program needs. A member whose code for this device is SASS
only and whose PTX is for a newer architecture (libcudadevrt ships compute_121 PTX
beside its sm_75..sm_121 cubins) is linked from that PTX with the device's
.target: only the functions the program reaches are kept, and an instruction the
device lacks fails when the module loads, naming it.
"""
from __future__ import annotations

import io
import re
import time
from dataclasses import dataclass, field

import arpy

from ptx_passes import ir
from ptx_passes.errors import PtxParseError
from ptx_passes.elf_sections import ELF_MAGIC
from ptx_passes.fatbin import FATBIN_MAGIC, FatbinError, cubins_of, ptx_of, read_fatbin_entries
from ptx_passes.linking import LinkError, LinkInput, link_inputs
from ptx_passes.parser import parse_module
from ptx_passes.printer import print_module
from ptx_passes.text_memo import memo_by_ptx_bytes
from tally.protocol.errors import (
    CUDA_ERROR_INVALID_IMAGE,
    CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUDA_ERROR_NOT_SUPPORTED,
    CUDA_SUCCESS,
    DeviceError,
)
from tally.jit.ptx_match import captured_ptx
from tally.server.client.modules import MAX_IMAGE_BYTES

# CUjitInputType
INPUT_CUBIN, INPUT_PTX, INPUT_FATBINARY, INPUT_OBJECT, INPUT_LIBRARY, INPUT_NVVM = range(6)


@dataclass(frozen=True)
class LinkResult:
    status: int          # CUDA_SUCCESS or why the link failed
    image: bytes         # NUL-terminated PTX; empty when the link failed
    info_log: str
    error_log: str


@dataclass
class LinkState:
    """One link state's inputs, each read when it is added."""

    inputs: list[LinkInput] = field(default_factory=list)
    bytes: int = 0
    notes: list[str] = field(default_factory=list)    # inputs left out, and why (the info log)

    def add(self, name: str, kind: int, data: bytes, compute_capability: tuple[int, int],
            record: bytes = b"") -> None:
        """Read one input (a CUjitInputType `kind`); DeviceError says why it cannot be linked.
        `record`: the JIT-capture record the client found for a bare cubin input."""
        if self.bytes + len(data) > MAX_IMAGE_BYTES:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{name}: the link's inputs exceed {MAX_IMAGE_BYTES} bytes")
        if kind == INPUT_LIBRARY:
            self.inputs.extend(library_members(name, data, compute_capability, self.notes))
            self.bytes += len(data)
            return
        kind = kind_by_content(kind, data)
        captured, unused = _captured_ptx(kind, data, record)
        if captured is not None:
            self.inputs.append(LinkInput(name, captured, _parse_input(captured, name, parse_module)))
            self.bytes += len(data)
            return
        if unused:
            unused = f"a JIT-capture record came with the cubin but was not used: {unused}"
            self.notes.append(f"{name}: {unused}")
        try:
            text = input_ptx(kind, data, name, compute_capability)
        except DeviceError as e:
            if unused:      # the input's error says why its record did not stand in for its PTX
                raise DeviceError(e.code, f"{e.message}; {unused}") from None
            raise
        except NothingForThisDevice as e:
            # Linked from its newer PTX only where the program needs its symbols (the device
            # runtime that nvcc -rdc links into every program: a kernel that launches
            # kernels needs it); without PTX, an error only if needed: cuLinkComplete names them.
            newer = _newer_ptx_for_device(data, name, compute_capability, self.notes)
            if newer is None:
                self.notes.append(str(e))
            else:
                self.inputs.append(LinkInput(name, newer, _parse_input(newer, name), library=True))
        else:
            self.inputs.append(LinkInput(name, text, _parse_input(text, name, parse_module)))
        self.bytes += len(data)

    def complete(self, verbose: bool, max_registers: int = 0) -> LinkResult:
        """Link what was added (cuLinkComplete); a failed link is a result, not an exception.
        `max_registers` (CU_JIT_MAX_REGISTERS, 0: none) caps every kernel's registers."""
        started = time.monotonic()
        try:
            linked = link_inputs(self.inputs, verbose)
        except LinkError as e:
            return LinkResult(CUDA_ERROR_INVALID_IMAGE, b"", "", "\n".join([*e.problems, *self.notes]))
        info = [*self.notes, *linked.log]
        text = linked.text if not max_registers else cap_registers(linked.text, max_registers)
        if verbose:
            info.append(f"link took {(time.monotonic() - started) * 1000:.1f} ms")
        return LinkResult(CUDA_SUCCESS, text.encode() + b"\0", "\n".join(info), "")


def cap_registers(text: str, limit: int) -> str:
    """The image with every kernel's `.maxnreg` at most `limit` (what the JIT's
    CU_JIT_MAX_REGISTERS asks of ptxas; a lower `.maxnreg` of the kernel's own stays)."""
    module = parse_module(text, "linked")
    for fn in module.functions():
        if not fn.is_entry or fn.body is None:
            continue
        own = fn.directive("maxnreg")
        if own is not None and own.args and int(own.args[0]) <= limit:
            continue
        fn.directives = [d for d in fn.directives if d.name != "maxnreg"] + [ir.FunctionDirective("maxnreg", (limit,))]
    return print_module(module)


class NothingForThisDevice(Exception):
    """A fatbin whose code for this device is SASS only: its PTX is for a newer
    architecture. nvcc links the device runtime (cudadevrt: cubins for sm_75..sm_121,
    PTX for compute_121 only) into every -rdc program; a driver uses its sm_90 cubin,
    a PTX-only device can use none of it, and the program needs it only if it calls it."""


def _captured_ptx(kind: int, data: bytes, record: bytes) -> tuple[str | None, str]:
    """(the PTX of a bare cubin input from its JIT-capture record, "") when the record
    matches the cubin (tally/jit/ptx_match.py); else (None, why not: "" without a record)."""
    if not record or kind != INPUT_CUBIN:
        return None, ""
    try:
        entries = read_fatbin_entries(data)
    except FatbinError:
        return None, ""                  # input_ptx says what is wrong with the input
    entry, why = captured_ptx(record, entries)
    return (entry.payload.decode(), "") if entry is not None else (None, why)


def kind_by_content(kind: int, data: bytes) -> int:
    """The input's kind as its bytes say: the driver takes a cubin or fatbin passed as
    PTX by its content (CuPy passes every input of its links as CU_JIT_INPUT_PTX, cubins
    of NVRTC's -dc included), so tally does too."""
    if kind != INPUT_PTX:
        return kind
    if data[:4] == ELF_MAGIC:
        return INPUT_CUBIN
    if len(data) >= 4 and int.from_bytes(data[:4], "little") == FATBIN_MAGIC:
        return INPUT_FATBINARY
    return kind


def input_ptx(kind: int, data: bytes, name: str, compute_capability: tuple[int, int]) -> str:
    """The PTX an input contributes: PTX itself, or the PTX of a fatbin / host object
    closest to the device (never newer than it: a driver does not JIT PTX for a newer
    architecture). Raises NothingForThisDevice for a fatbin with only SASS that fits the
    device, DeviceError saying why for an input with nothing usable."""
    if kind == INPUT_PTX:
        try:
            return data.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError as e:
            raise DeviceError(CUDA_ERROR_INVALID_PTX, f"{name}: PTX input is not UTF-8 text ({e})") from None
    if kind in (INPUT_FATBINARY, INPUT_OBJECT, INPUT_CUBIN):
        device_arch = compute_capability[0] * 10 + compute_capability[1]
        try:
            entries = read_fatbin_entries(data)
            fitting = [e for e in entries if e.kind == "ptx" and e.usable_on(device_arch)]
            ptx = ptx_of(fitting, prefer_arch=device_arch)
            cubins = cubins_of(entries)
        except FatbinError as e:
            raise DeviceError(CUDA_ERROR_INVALID_IMAGE, f"{name}: input not understood: {e}") from None
        if ptx is not None:
            return ptx
        newer = sorted({e.arch for e in entries if e.kind == "ptx"})
        if newer and any(a // 10 == compute_capability[0] and a <= device_arch for a in cubins):
            raise NothingForThisDevice(
                f"{name}: left out: its code for this device (compute capability {compute_capability[0]}."
                f"{compute_capability[1]}) is SASS only, which tally links no further, and its PTX is for "
                f"{', '.join(f'compute_{a}' for a in newer)}, newer than the device")
        archs = ", ".join(f"sm_{a}" for a in cubins) or "none"
        raise DeviceError(CUDA_ERROR_NO_BINARY_FOR_GPU,
                          f"{name}: holds no PTX (cubins: {archs}); tally's linker links PTX: build the input with "
                          "PTX (e.g. nvcc -gencode arch=compute_80,code=compute_80)")
    if kind == INPUT_NVVM:
        raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, f"{name}: LTO IR (CU_JIT_INPUT_NVVM) is not linked by tally; "
                                                    "compile it to PTX first")
    raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{name}: unknown CUjitInputType {kind}")


AR_MAGIC = b"!<arch>\n"
_PTX_TEXT = re.compile(rb"^\s*(//|\.version)", re.MULTILINE)


def library_members(name: str, data: bytes, compute_capability: tuple[int, int],
                    notes: list[str]) -> list[LinkInput]:
    """The linkable members of a static library, each marked `library` (linked only if
    needed); members with nothing for this device are named in `notes`."""
    if not data.startswith(AR_MAGIC):
        raise DeviceError(CUDA_ERROR_INVALID_IMAGE, f"{name}: not a static library (an ar archive starts with "
                                                    "'!<arch>'); pass it as the kind of input it is")
    try:
        archive = arpy.Archive(fileobj=io.BytesIO(data))
        archive.read_all_headers()
        members = [(m.decode(errors="replace"), archive.open(m).read()) for m in archive.namelist()]
    except (arpy.ArchiveFormatError, ValueError, OSError) as e:
        raise DeviceError(CUDA_ERROR_INVALID_IMAGE, f"{name}: the static library does not read: {e}") from None
    out: list[LinkInput] = []
    for member, payload in members:
        label = f"{name}({member})"
        kind = INPUT_PTX if _PTX_TEXT.match(payload[:256]) else INPUT_OBJECT
        try:
            text = input_ptx(kind, payload, label, compute_capability)
        except NothingForThisDevice:
            text = _newer_ptx_for_device(payload, label, compute_capability, notes)
        except DeviceError as e:
            notes.append(f"{label}: left out: {e.message}")
            continue
        if text is None:
            continue
        out.append(LinkInput(label, text, _parse_input(text, label), library=True))
    if not out:
        notes.append(f"{name}: no member holds PTX tally can link")
    return out


def _newer_ptx_for_device(payload: bytes, label: str, compute_capability: tuple[int, int],
                          notes: list[str]) -> str | None:
    """A member's newest PTX with the device's .target, for a member whose code for
    this device is SASS only (see the module docstring)."""
    entries = read_fatbin_entries(payload)
    ptx = ptx_of([e for e in entries if e.kind == "ptx"], prefer_arch=None)
    if ptx is None:
        return None
    device = f"sm_{compute_capability[0]}{compute_capability[1]}"
    retargeted, count = re.subn(r"^(\s*\.target\s+)(?:sm|compute)_\d+[af]?", lambda m: m.group(1) + device, ptx,
                                count=1, flags=re.MULTILINE)
    if not count:
        return None
    newer = sorted({e.arch for e in entries if e.kind == "ptx"})
    notes.append(f"{label}: its code for this device is SASS; its PTX for "
                 f"{', '.join(f'compute_{a}' for a in newer)} is linked with .target {device} where needed")
    return retargeted


# libcudadevrt's PTX five times over (ptx_passes/text_memo.py: about 50 MiB parsed)
PARSED_INPUT_PTX_BYTES = 4 << 20


@memo_by_ptx_bytes(PARSED_INPUT_PTX_BYTES)
def _parsed_by_text(text: str, label: str):
    return parse_module(text, label)


def _parse_input(text: str, label: str, parse=None):
    """The input parsed (by `parse`; default: kept for the next link of the same text),
    or DeviceError saying where it is not PTX."""
    try:
        return (parse or _parsed)(text, label)
    except PtxParseError as e:
        raise DeviceError(CUDA_ERROR_INVALID_PTX, f"{label}: not valid PTX: {e.one_line()}") from None


def _parsed(text: str, label: str):
    """Parsed PTX, kept for the next link of the same text (numba links libcudadevrt,
    780 KB of PTX, into every kernel that synchronizes its grid). The linker never
    changes a parsed input."""
    return _parsed_by_text(text, label)
