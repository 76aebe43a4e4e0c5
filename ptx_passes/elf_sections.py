"""Header-level view of an ELF image (host binary or cubin), read with pyelftools.

The fatbin and cubin readers each promise one exception type on damaged input,
but pyelftools raises a zoo of them (ELFError, ELFParseError, struct.error,
IndexError, UnicodeDecodeError ...). Every pyelftools call goes through
`_guard`, which turns whatever it raised into the caller's error class.

Section contents are sliced from the caller's buffer with a bounds check instead
of going through pyelftools' `data()`, so a truncated file fails with a clear
message and a host library of hundreds of MB is not copied section by section.
"""
from __future__ import annotations

import io
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from elftools.elf.elffile import ELFFile

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
SHT_NOBITS = 8
SHT_REL = 9
SHT_RELA = 4
SHF_ALLOC = 0x2

# R_<machine>_RELATIVE: the loader stores base + addend at the address.
_RELATIVE_RELOCATION = {62: 8, 183: 1027}  # EM_X86_64, EM_AARCH64


@dataclass(frozen=True)
class ElfSection:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int

    @property
    def nobits(self) -> bool:
        return self.type == SHT_NOBITS


@dataclass(frozen=True)
class ElfSymbol:
    index: int
    name: str
    type: str  # "STT_FUNC", "STT_OBJECT", "STT_SECTION" ...
    bind: str
    other: int  # raw st_other byte; CUDA marks kernels with 0x10 (STO_CUDA_ENTRY)
    section_index: int  # 0 when undefined or special
    value: int
    size: int


@dataclass(frozen=True)
class ElfRelocation:
    offset: int
    type: int
    symbol_index: int
    addend: int


class ElfImage:
    """Sections, symbols and relocations of one ELF image held in memory."""

    def __init__(self, data: bytes, error: type[Exception], what: str = "ELF image"):
        self._data = data
        self._view = memoryview(data)
        self._error = error
        self._what = what
        if data[:4] != ELF_MAGIC:
            raise error(f"{what}: not an ELF image (it starts with {bytes(data[:4]).hex(' ')}, not 7f 45 4c 46)")
        if len(data) < 64:
            raise error(f"{what}: {len(data)} bytes is too short for an ELF header (truncated?)")
        with self._guard("reading the ELF header"):
            self._elf = ELFFile(io.BytesIO(data))
            header = self._elf.header
            self.elf_type: str = str(header["e_type"])
            self.flags: int = int(header["e_flags"])
            self.abi_version: int = int(header["e_ident"]["EI_ABIVERSION"])
            self.is_64bit: bool = self._elf.elfclass == 64
            self.little_endian: bool = self._elf.little_endian
        # pyelftools names machines it knows ("EM_CUDA"); the raw number is what we compare.
        self.machine: int = struct.unpack_from("<H" if self.little_endian else ">H", data, 18)[0]
        with self._guard("reading the section headers"):
            shoff, shentsize = int(header["e_shoff"]), int(header["e_shentsize"])
            self.sections: list[ElfSection] = [
                ElfSection(
                    index=i, name=sec.name, type=self._raw_section_type(shoff + i * shentsize),
                    flags=int(sec["sh_flags"]),
                    addr=int(sec["sh_addr"]), offset=int(sec["sh_offset"]), size=int(sec["sh_size"]),
                    link=int(sec["sh_link"]), info=int(sec["sh_info"]), entsize=int(sec["sh_entsize"]),
                )
                for i, sec in enumerate(self._elf.iter_sections())
            ]
        self._by_name = {}
        for sec in self.sections:
            self._by_name.setdefault(sec.name, sec)
        self._symbols: list[ElfSymbol] | None = None

    def _raw_section_type(self, header_offset: int) -> int:
        """sh_type as a number: pyelftools turns the ones it knows into names, CUDA's own stay numbers."""
        return struct.unpack_from("<I" if self.little_endian else ">I", self._data, header_offset + 4)[0]

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except self._error:
            raise
        except Exception as exc:  # pyelftools has no common base class for damaged input
            raise self._error(f"{self._what}: damaged ELF while {doing} ({type(exc).__name__}: {exc})") from exc

    def section(self, name: str) -> ElfSection | None:
        return self._by_name.get(name)

    def data(self, section: ElfSection) -> memoryview:
        """The section's bytes; an error if it has none in the file or runs past its end."""
        if section.nobits:
            raise self._error(f"{self._what}: section {section.name!r} has no contents in the file (SHT_NOBITS)")
        end = section.offset + section.size
        if end > len(self._data):
            raise self._error(
                f"{self._what}: section {section.name!r} claims bytes {section.offset:#x}..{end:#x} "
                f"but the file is only {len(self._data):#x} bytes long (truncated?)"
            )
        return self._view[section.offset:end]

    def section_containing(self, address: int) -> ElfSection | None:
        """The loaded section whose file contents cover a virtual address."""
        for sec in self.sections:
            if sec.flags & SHF_ALLOC and not sec.nobits and sec.addr <= address < sec.addr + sec.size:
                return sec
        return None

    def symbols(self) -> list[ElfSymbol]:
        """Entries of .symtab (empty when the image has none)."""
        if self._symbols is None:
            self._symbols = self._read_symbols()
        return self._symbols

    def _read_symbols(self) -> list[ElfSymbol]:
        symtab = self.section(".symtab")
        if symtab is None:
            return []
        raw = self.data(symtab)
        entsize = symtab.entsize or (24 if self.is_64bit else 16)
        other_at = 5 if self.is_64bit else 13  # offset of st_other in Elf64_Sym / Elf32_Sym
        with self._guard("reading .symtab"):
            table = self._elf.get_section(symtab.index)
            symbols = []
            for i, sym in enumerate(table.iter_symbols()):
                shndx = sym["st_shndx"]
                symbols.append(ElfSymbol(
                    index=i, name=sym.name, type=str(sym["st_info"]["type"]), bind=str(sym["st_info"]["bind"]),
                    other=raw[i * entsize + other_at] if (i + 1) * entsize <= len(raw) else 0,
                    section_index=shndx if isinstance(shndx, int) else 0,
                    value=int(sym["st_value"]), size=int(sym["st_size"]),
                ))
        return symbols

    def relocations_for(self, target: ElfSection) -> list[ElfRelocation]:
        """REL/RELA entries that patch `target` (object files)."""
        found: list[ElfRelocation] = []
        for sec in self.sections:
            if sec.type in (SHT_REL, SHT_RELA) and sec.info == target.index:
                found.extend(self._relocations_in(sec))
        return found

    def relative_relocation_addends(self) -> dict[int, int]:
        """address -> addend of the R_*_RELATIVE entries in .rela.dyn (position-independent binaries)."""
        rela = self.section(".rela.dyn")
        kind = _RELATIVE_RELOCATION.get(self.machine)
        if rela is None or kind is None:
            return {}
        return {r.offset: r.addend for r in self._relocations_in(rela) if r.type == kind}

    def _relocations_in(self, sec: ElfSection) -> list[ElfRelocation]:
        self.data(sec)  # bounds check before pyelftools reads it
        with self._guard(f"reading relocations in {sec.name}"):
            table = self._elf.get_section(sec.index)
            return [
                ElfRelocation(
                    offset=int(rel["r_offset"]), type=int(rel["r_info_type"]),
                    symbol_index=int(rel["r_info_sym"]), addend=int(rel["r_addend"]) if rel.is_RELA() else 0,
                )
                for rel in table.iter_relocations()
            ]

