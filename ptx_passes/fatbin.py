"""Read CUDA fat binaries: list their PTX and cubin entries, decompressed.

Layout (nvcc 13, measured; see DESIGN.md "Fatbinary layout"):

  fatbin header, 16 bytes: u32 magic 0xBA55ED50, u16 version 1, u16 header size,
      u64 size of the entries that follow.
  entry header, 64 bytes plus an optional tail (PTX 80, sm_100+ cubin 112, -G
      more): u16 kind @0, u16 version @2, u32 header size @4, u64 padded payload
      size @8 (next entry = entry + header size + this), u32 compressed size
      @0x10, u16 minor @0x18 + u16 major @0x1a (PTX ISA version for PTX, ELF
      code version for cubins), u32 sm arch @0x1c, u64 flags @0x28, u64
      uncompressed size @0x38.
  flags: 0x1 64-bit, 0x2 debug (-G), 0x10 linux host, 0x2000 LZ4 block format,
      0x8000 zstd frame. 0x1000 is an older NVIDIA-private compression that
      nvcc 13 no longer writes; it is rejected as unknown.

A host ELF (executable, shared library, object) keeps its fatbins back to back
in `.nv_fatbin` (`-rdc` objects: in `__nv_relfatbin`, found through the wrapper,
with zstd-compressed cubins); `.nvFatBinSegment` holds one `__fatBinC_Wrapper_t` per fatbin
{u32 magic 0x466243b1, u32 version, u64 pointer to the fatbin, u64 prelinked
fatbins (version 2) or 0}. cudart hands the driver that wrapper's address, so
the server sees a wrapper plus the fatbin bytes the client copied from it.

Entries of other kinds (8: LTO IR from `code=lto_XX`, stored obfuscated) are
skipped: tally can neither rewrite nor load them.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Union

import lz4.block
import zstandard

from .elf_sections import EM_CUDA, ELF_MAGIC, ElfImage

FATBIN_MAGIC = 0xBA55ED50
WRAPPER_MAGIC = 0x466243B1

FATBIN_HEADER = struct.Struct("<IHHQ")
ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")  # the 64 bytes every entry header starts with
WRAPPER_HEAD = struct.Struct("<IIQ")  # magic, version, fatbin pointer (the 4th field is not needed)

KIND_PTX = 1
KIND_CUBIN = 2
FLAG_DEBUG = 0x2
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
_COMPRESSION_FLAGS = 0x1000 | FLAG_LZ4 | FLAG_ZSTD
_LZ4_MAX_RATIO = 255  # an LZ4 block can never expand more than this; bounds what we allocate

BinaryLike = Union[bytes, bytearray, memoryview]


class FatbinError(ValueError):
    """The input is not a readable fatbin, host ELF with device code, cubin or PTX file."""


@dataclass(frozen=True)
class FatbinEntry:
    kind: Literal["ptx", "cubin"]
    arch: int  # sm arch: 80 for sm_80 / compute_80
    version: tuple[int, int]  # (major, minor): PTX ISA version for PTX, ELF code version for cubins
    flags: int  # entry flags as stored (0 for a bare cubin or PTX file)
    compressed: Literal[None, "zstd", "lz4"]
    payload: bytes  # PTX text without trailing NULs, or cubin ELF bytes; decompressed
    offset: int  # where the entry header starts in the input (0 for a bare cubin or PTX file)
    fatbin_offset: int = 0  # where the fatbin holding it starts in the input

    @property
    def filename_suffix(self) -> str:
        return f"sm_{self.arch}.{self.kind}"

    @property
    def arch_specific(self) -> bool:
        """Code for sm_XXa / compute_XXa (PTX `.target sm_90a`): it runs on exactly that
        architecture only, and may use its architecture-specific instructions (wgmma, setmaxnreg)."""
        return bool(self.flags & ARCH_SPECIFIC_FLAG)

    def usable_on(self, device_arch: int) -> bool:
        """PTX the device can JIT, or a cubin it can run (same major, minor not newer)."""
        if self.arch_specific:
            return self.arch == device_arch
        if self.kind == "ptx":
            return self.arch <= device_arch
        return self.arch // 10 == device_arch // 10 and self.arch % 10 <= device_arch % 10


# The entry flag nvcc sets on arch-specific code (seen on nvcc 13.0's -arch=sm_90a output,
# whose compute_90a PTX says `.target sm_90a`; its plain compute_90 PTX lacks the bit).
ARCH_SPECIFIC_FLAG = 0x100000


def read_fatbin_entries(data: BinaryLike | str | Path) -> list[FatbinEntry]:
    """Entries of a fatbin (one or several concatenated), host ELF, bare cubin or PTX file.

    A str is a path, like Path; pass PTX text as bytes.
    """
    blob = _load(data)
    if len(blob) >= 4 and struct.unpack_from("<I", blob)[0] == FATBIN_MAGIC:
        return _read_concatenated(blob, 0, len(blob), "fatbin")
    if blob[:4] == ELF_MAGIC:
        return _read_elf(blob)
    if len(blob) >= 4 and struct.unpack_from("<I", blob)[0] == WRAPPER_MAGIC:
        raise FatbinError(
            "this is a __fatBinC_Wrapper_t, which only points at the fatbin: read the fatbin from the "
            "process that owns the pointer (parse_wrapper gives it, fatbin_size how many bytes to copy)"
        )
    ptx = _ptx_entry(blob)
    if ptx is not None:
        return [ptx]
    raise FatbinError(
        f"not a fatbin, ELF image or PTX text: {len(blob)} bytes starting with {bytes(blob[:8]).hex(' ')} "
        f"(a fatbin starts with 50 ed 55 ba, an ELF with 7f 45 4c 46)"
    )


def parse_wrapper(wrapper_bytes: BinaryLike) -> tuple[int, int, int]:
    """(magic, version, fatbin pointer) of a __fatBinC_Wrapper_t image (x86-64/aarch64 layout)."""
    if len(wrapper_bytes) < WRAPPER_HEAD.size:
        raise FatbinError(
            f"a __fatBinC_Wrapper_t needs {WRAPPER_HEAD.size} bytes (magic, version, pointer); got {len(wrapper_bytes)}"
        )
    magic, version, pointer = WRAPPER_HEAD.unpack_from(wrapper_bytes)
    if magic != WRAPPER_MAGIC:
        raise FatbinError(f"bad __fatBinC_Wrapper_t magic {magic:#010x} (expected {WRAPPER_MAGIC:#010x})")
    return magic, version, pointer


def fatbin_size(header_bytes: BinaryLike) -> int:
    """Total size of a fatbin (header included) from its first 16 bytes."""
    magic, version, header_size, body_size = _fatbin_header(header_bytes, 0)
    return header_size + body_size


def wrapped_fatbins(elf: BinaryLike | str | Path) -> list[bytes]:
    """The fatbin each `.nvFatBinSegment` wrapper of a host ELF points at, resolved through its sections.

    Object files are resolved through the relocations on the wrapper's pointer;
    executables and shared libraries through the pointer's virtual address (and
    the R_*_RELATIVE entry for it, where the linker left the field zero).
    """
    blob = _load(elf)
    image = ElfImage(blob, FatbinError, "host ELF")
    return [blob[start:start + size] for start, size in _wrapper_targets(image, blob)]


def ptx_of(entries: list[FatbinEntry], prefer_arch: int | None = None) -> str | None:
    """The PTX to JIT: highest arch <= prefer_arch, else the highest there is; None without PTX.
    Of a generic and an arch-specific PTX of that arch (nvcc -arch=sm_90a writes both), the
    arch-specific one when the device is that arch (or none is named), else the generic one."""
    ptx = [e for e in entries if e.kind == "ptx"]
    if not ptx:
        return None
    fitting = [e for e in ptx if prefer_arch is None or e.arch <= prefer_arch] or ptx
    best_arch = max(e.arch for e in fitting)
    group = _one_kind([e for e in fitting if e.arch == best_arch], prefer_arch in (None, best_arch))
    chosen = _one_payload(group, "PTX")
    try:
        return chosen.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FatbinError(f"the compute_{best_arch} PTX is not UTF-8 text ({exc})") from exc


def cubins_of(entries: list[FatbinEntry]) -> dict[int, bytes]:
    """arch -> cubin ELF bytes."""
    by_arch: dict[int, list[FatbinEntry]] = {}
    for e in entries:
        if e.kind == "cubin":
            by_arch.setdefault(e.arch, []).append(e)
    return {arch: _one_payload(_one_kind(group, True), "cubin") for arch, group in sorted(by_arch.items())}


def extract(path: str | Path, out_dir: str | Path) -> list[Path]:
    """Write each entry as <stem>.<index>.sm_<arch>.ptx / .cubin; returns the paths written."""
    entries = read_fatbin_entries(Path(path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for index, entry in enumerate(entries):
        target = out / f"{Path(path).stem}.{index}.{entry.filename_suffix}"
        target.write_bytes(entry.payload)
        written.append(target)
    return written


# --- input kinds ---------------------------------------------------------------------------------

def _load(data: BinaryLike | str | Path) -> bytes:
    if isinstance(data, (str, Path)):
        try:
            return Path(data).read_bytes()
        except OSError as exc:
            raise FatbinError(f"cannot read {str(data)!r}: {exc.strerror or exc}") from exc
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected bytes, bytearray, memoryview, str or Path, got {type(data).__name__}")


def _read_elf(blob: bytes) -> list[FatbinEntry]:
    if len(blob) >= 20 and struct.unpack_from("<H", blob, 18)[0] == EM_CUDA:
        return [_cubin_entry(blob)]
    image = ElfImage(blob, FatbinError, "host ELF")
    section = image.section(".nv_fatbin")
    if section is not None:
        start = section.offset
        image.data(section)  # bounds check
        return _read_concatenated(blob, start, start + section.size, ".nv_fatbin")
    if image.section(".nvFatBinSegment") is not None:
        entries: list[FatbinEntry] = []
        for start, size in _wrapper_targets(image, blob):
            entries.extend(_read_concatenated(blob, start, start + size, "wrapped fatbin"))
        return entries
    raise FatbinError(
        "this ELF has neither a .nv_fatbin nor a .nvFatBinSegment section: it carries no CUDA device code "
        "(was it built by nvcc from .cu sources, or are the kernels in another library?)"
    )


def _cubin_entry(cubin: bytes) -> FatbinEntry:
    image = ElfImage(cubin, FatbinError, "cubin")
    # ELF ABI version 8 (CUDA 12.8+) keeps the sm arch in bits 8..15 of e_flags, older ones in bits 0..7.
    arch = (image.flags >> 8) & 0xFF if image.abi_version >= 8 else image.flags & 0xFF
    return FatbinEntry("cubin", arch, (1, image.abi_version), 0, None, cubin, 0, 0)


_PTX_TARGET = re.compile(rb"^\s*\.target\s+(?:sm|compute)_(\d+)", re.MULTILINE)
_PTX_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.MULTILINE)


def _ptx_entry(blob: bytes) -> FatbinEntry | None:
    text = blob.rstrip(b"\0")
    target, version = _PTX_TARGET.search(text), _PTX_VERSION.search(text)
    if target is None or version is None:
        return None
    return FatbinEntry("ptx", int(target.group(1)), (int(version.group(1)), int(version.group(2))),
                       0, None, text, 0, 0)


# --- fatbin containers ---------------------------------------------------------------------------

def _fatbin_header(blob: BinaryLike, at: int, end: int | None = None) -> tuple[int, int, int, int]:
    end = len(blob) if end is None else end
    if end - at < FATBIN_HEADER.size:
        raise FatbinError(
            f"truncated fatbin header at offset {at:#x}: need {FATBIN_HEADER.size} bytes, {max(end - at, 0)} left"
        )
    magic, version, header_size, body_size = FATBIN_HEADER.unpack_from(blob, at)
    if magic != FATBIN_MAGIC:
        raise FatbinError(f"bad fatbin magic {magic:#010x} at offset {at:#x} (expected {FATBIN_MAGIC:#010x})")
    if header_size < FATBIN_HEADER.size:
        raise FatbinError(f"fatbin at offset {at:#x} claims a {header_size}-byte header; it is at least 16")
    return magic, version, header_size, body_size


def _read_concatenated(blob: bytes, start: int, end: int, what: str) -> list[FatbinEntry]:
    """Fatbins laid back to back (as in .nv_fatbin), zero padding allowed between them."""
    if end > len(blob):
        raise FatbinError(f"{what}: expected {end - start:#x} bytes at offset {start:#x}, the input ends at {len(blob):#x}")
    entries: list[FatbinEntry] = []
    at = start
    while at < end:
        if blob[at] == 0:  # alignment padding between fatbins
            at += 1
            continue
        _, _, header_size, body_size = _fatbin_header(blob, at, end)
        body_end = at + header_size + body_size
        if body_end > end:
            raise FatbinError(
                f"{what}: the fatbin at offset {at:#x} claims {header_size + body_size:#x} bytes "
                f"but only {end - at:#x} are there (truncated?)"
            )
        entries.extend(_read_entries(blob, at, at + header_size, body_end))
        at = body_end
    return entries


def _read_entries(blob: bytes, fatbin_at: int, at: int, end: int) -> list[FatbinEntry]:
    entries = []
    while at < end:
        if end - at < ENTRY_HEADER.size:
            raise FatbinError(
                f"truncated entry header at offset {at:#x}: need {ENTRY_HEADER.size} bytes, "
                f"the fatbin at {fatbin_at:#x} ends {end - at} bytes later"
            )
        (kind, _, header_size, padded_size, compressed_size, _, minor, major, arch,
         _, _, flags, _, uncompressed_size) = ENTRY_HEADER.unpack_from(blob, at)
        payload_at = at + header_size
        if header_size < ENTRY_HEADER.size or payload_at + padded_size > end:
            raise FatbinError(
                f"entry at offset {at:#x} (header {header_size} bytes, payload {padded_size:#x} bytes) "
                f"runs past the end of its fatbin at {end:#x}"
            )
        if kind in (KIND_PTX, KIND_CUBIN):
            stored = blob[payload_at:payload_at + padded_size]
            entries.append(_decode_entry(kind, arch, (major, minor), flags, stored,
                                         compressed_size, uncompressed_size, at, fatbin_at))
        at = payload_at + padded_size
    return entries


def _decode_entry(kind: int, arch: int, version: tuple[int, int], flags: int, stored: bytes,
                  compressed_size: int, uncompressed_size: int, at: int, fatbin_at: int) -> FatbinEntry:
    name = f"{'PTX' if kind == KIND_PTX else 'cubin'} entry for sm_{arch} at offset {at:#x}"
    method = _compression(flags, name)
    if method is None:
        payload = stored
    else:
        if compressed_size > len(stored):
            raise FatbinError(f"{name}: compressed size {compressed_size:#x} exceeds its payload ({len(stored):#x})")
        payload = _decompress(method, stored[:compressed_size], uncompressed_size, name)
    if kind == KIND_PTX:
        return FatbinEntry("ptx", arch, version, flags, method, payload.rstrip(b"\0"), at, fatbin_at)
    if payload[:4] != ELF_MAGIC:
        raise FatbinError(f"{name}: the payload is not an ELF image (starts with {payload[:4].hex(' ')})")
    return FatbinEntry("cubin", arch, version, flags, method, payload, at, fatbin_at)


def _compression(flags: int, name: str) -> Literal[None, "zstd", "lz4"]:
    method = flags & _COMPRESSION_FLAGS
    if method == 0:
        return None
    if method == FLAG_ZSTD:
        return "zstd"
    if method == FLAG_LZ4:
        return "lz4"
    raise FatbinError(
        f"{name}: unknown compression flag {method:#x} in flags {flags:#x} "
        f"(known: {FLAG_ZSTD:#x} zstd, {FLAG_LZ4:#x} LZ4); rebuild with nvcc --no-compress to read it"
    )


def _decompress(method: str, data: bytes, expected: int, name: str) -> bytes:
    try:
        if method == "zstd":
            # decompressobj grows its output as it goes instead of trusting a size from the header.
            out = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        else:
            if expected > _LZ4_MAX_RATIO * len(data) + 16:
                raise FatbinError(f"{name}: claims {expected:#x} bytes from {len(data):#x} LZ4 bytes, "
                                  f"more than LZ4 can expand to")
            out = lz4.block.decompress(data, uncompressed_size=expected)
    except (zstandard.ZstdError, lz4.block.LZ4BlockError) as exc:
        raise FatbinError(f"{name}: {method} decompression failed ({exc})") from exc
    if len(out) != expected:
        raise FatbinError(f"{name}: {method} data decompressed to {len(out):#x} bytes, header says {expected:#x}")
    return out


def _one_kind(group: list[FatbinEntry], arch_specific: bool) -> list[FatbinEntry]:
    """The arch-specific or the generic entries of one arch's group, as asked, when it has both."""
    chosen = [e for e in group if e.arch_specific == arch_specific]
    return chosen if chosen and len(chosen) < len(group) else group


def _one_payload(group: list[FatbinEntry], what: str) -> bytes:
    payloads = {e.payload for e in group}
    if len(payloads) > 1:
        where = ", ".join(f"{e.fatbin_offset:#x}" for e in group)
        raise FatbinError(
            f"{len(payloads)} different {what} entries for sm_{group[0].arch} (in fatbins at offsets {where}): "
            f"pass the entries of one fatbin (filter on FatbinEntry.fatbin_offset)"
        )
    return group[0].payload


# --- wrappers ----------------------------------------------------------------------------------

def _wrapper_targets(image: ElfImage, blob: bytes) -> list[tuple[int, int]]:
    """(file offset, size) of the fatbin each wrapper in .nvFatBinSegment points at."""
    segment = image.section(".nvFatBinSegment")
    if segment is None:
        raise FatbinError("this ELF has no .nvFatBinSegment section (no __fatBinC_Wrapper_t to follow)")
    if not (image.is_64bit and image.little_endian):
        raise FatbinError("only 64-bit little-endian host ELF files are supported")
    raw = image.data(segment)
    wrapper_size = WRAPPER_HEAD.size + 8
    if len(raw) % wrapper_size:
        raise FatbinError(f".nvFatBinSegment is {len(raw)} bytes, not a whole number of {wrapper_size}-byte wrappers")
    by_offset = {r.offset: r for r in image.relocations_for(segment)}
    relative = image.relative_relocation_addends() if image.elf_type != "ET_REL" else {}
    symbols = image.symbols() if by_offset else []
    targets = []
    for at in range(0, len(raw), wrapper_size):
        _, _, pointer = parse_wrapper(raw[at:at + WRAPPER_HEAD.size])
        field = at + 8
        if image.elf_type == "ET_REL":
            reloc = by_offset.get(field)
            if reloc is None or reloc.symbol_index >= len(symbols):
                raise FatbinError(f"object file: no usable relocation for the fatbin pointer of wrapper {at // wrapper_size}")
            symbol = symbols[reloc.symbol_index]
            if not 0 < symbol.section_index < len(image.sections):
                raise FatbinError(f"object file: wrapper {at // wrapper_size} points at an undefined symbol {symbol.name!r}")
            section = image.sections[symbol.section_index]
            start = section.offset + symbol.value + reloc.addend
        else:
            address = pointer or relative.get(segment.addr + field, 0)
            section = image.section_containing(address)
            if section is None:
                raise FatbinError(f"wrapper {at // wrapper_size} points at {address:#x}, which no loaded section holds")
            start = section.offset + address - section.addr
        if not 0 <= start < len(blob):
            raise FatbinError(f"wrapper {at // wrapper_size} points outside the file (offset {start:#x})")
        size = fatbin_size(blob[start:start + FATBIN_HEADER.size])
        if start + size > len(blob):
            raise FatbinError(f"wrapper {at // wrapper_size}: the fatbin at offset {start:#x} claims {size:#x} bytes, "
                              f"the file ends at {len(blob):#x} (truncated?)")
        targets.append((start, size))
    return targets
