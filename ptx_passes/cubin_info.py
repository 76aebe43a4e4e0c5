"""Per-kernel facts a cubin records for the driver: parameter layout, registers, shared memory, limits.

Where each fact lives (nvcc 13, sm_80/sm_90, checked against `ptxas -v`):

- `.nv.info.<kernel>` holds EIATTR records: u8 format, u8 attribute, u16 that is
  the value itself (format 0x03 HVAL, 0x02 BVAL) or the size of the data that
  follows (format 0x04 SVAL); format 0x01 (NVAL) has neither.
  - KPARAM_INFO 0x17 (12 bytes, one per parameter): u32 index, u16 ordinal,
    u16 offset, u32 w with size = (w >> 18) & 0x3fff.
  - CBANK_PARAM_SIZE 0x19 (HVAL): size of the parameter block.
  - PARAM_CBANK 0x0a (8 bytes): u32 symbol of .nv.constant0.<kernel>, u16 offset
    of the parameters in constant bank 0 (0x160 on sm_80, 0x210 on sm_90), u16 size.
  - MAX_THREADS 0x05 / REQNTID 0x10 (3 x u32): __launch_bounds__ / .maxntid and .reqntid.
  - MAXREG_COUNT 0x1b (HVAL): register cap (0xff when none was asked for).
  - NUM_BARRIERS 0x4c (BVAL), COOP_GROUP_INSTR_OFFSETS 0x28 (grid-wide sync),
    CTA_PER_CLUSTER 0x3d (3 x u32, __cluster_dims__).
- The module-wide `.nv.info` holds records keyed by symbol index (u32 symbol, u32
  value): REGCOUNT 0x2f (registers per thread) and FRAME_SIZE 0x11 (stack bytes).
  sm_80 cubins also put the register count in bits 24..31 of the `.text.<kernel>`
  section's sh_info; sm_90 ones do not, so REGCOUNT is the source.
- Static shared memory is the size of `.nv.shared.<kernel>`. On sm_90 and newer
  that section also covers the 1 KiB the hardware reserves at the start of shared
  memory (static data starts at 0x400; kernels with no shared data of their own
  may still have a 0x400-byte section); `static_shared` reports the section size
  minus that reserved part, which is what `ptxas -v` prints as "smem".
- Kernels are the STT_FUNC symbols whose st_other has 0x10 (STO_CUDA_ENTRY);
  `-rdc` device functions get `.nv.info.<name>` sections too but not that bit.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .elf_sections import EM_CUDA, ElfImage

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4

EIATTR_MAX_THREADS = 0x05
EIATTR_PARAM_CBANK = 0x0A
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_COOP_GROUP_INSTR_OFFSETS = 0x28
EIATTR_REGCOUNT = 0x2F
EIATTR_CTA_PER_CLUSTER = 0x3D
EIATTR_NUM_BARRIERS = 0x4C

STO_CUDA_ENTRY = 0x10
RESERVED_SHARED_FROM_SM90 = 0x400  # the reserved 1 KiB sm_90+ cubins count inside .nv.shared.<kernel>


class CubinError(ValueError):
    """The input is not a cubin this reader understands, or its .nv.info is damaged."""


@dataclass(frozen=True)
class KernelInfo:
    name: str
    params: list[tuple[int, int]]  # (offset, size) in ordinal order
    param_total: int  # bytes of the parameter block (EIATTR_CBANK_PARAM_SIZE)
    param_cbank_offset: int | None  # where the block starts in constant bank 0
    registers: int | None  # per thread
    static_shared: int  # bytes of __shared__ data declared in the kernel
    max_threads: tuple[int, int, int] | None  # __launch_bounds__ / .maxntid
    required_threads: tuple[int, int, int] | None  # .reqntid
    max_registers: int | None  # register cap from __launch_bounds__ / __maxnreg__; None when uncapped
    frame_size: int  # stack bytes per thread
    barriers: int  # named barriers used
    uses_grid_sync: bool  # cooperative-groups grid.sync(): the kernel cannot be sliced or preempted
    cluster_dims: tuple[int, int, int] | None  # __cluster_dims__


@dataclass(frozen=True)
class _Record:
    attribute: int
    format: int
    value: int  # the inline u16 (HVAL/BVAL) or the data size (SVAL)
    data: bytes


def kernel_info(cubin: bytes) -> dict[str, KernelInfo]:
    """name -> KernelInfo for every kernel (entry function) of a cubin."""
    image = _open(cubin)
    arch = _arch(image)
    per_symbol = _module_records(image)
    infos = {}
    for symbol in image.symbols():
        if symbol.type != "STT_FUNC" or not symbol.other & STO_CUDA_ENTRY:
            continue
        records = _records(image, f".nv.info.{symbol.name}", required=False)
        infos[symbol.name] = _kernel(image, arch, symbol.name, symbol.index, records, per_symbol)
    return infos


def kernel_names(cubin: bytes) -> list[str]:
    return list(kernel_info(cubin))


def kernel_params(cubin: bytes) -> dict[str, list[tuple[int, int]]]:
    """name -> [(offset, size)] in parameter order."""
    return {name: info.params for name, info in kernel_info(cubin).items()}


def kernel_param_total(cubin: bytes, name: str) -> int:
    infos = kernel_info(cubin)
    if name not in infos:
        raise CubinError(f"no kernel named {name!r} in this cubin; it has: {', '.join(sorted(infos)) or 'none'}")
    return infos[name].param_total


def variable_names(cubin: bytes) -> list[str]:
    """The module variables a cubin defines (__device__ and __constant__: object symbols in
    its .nv.global* and .nv.constant<bank> sections, not the kernels' parameter banks,
    .nv.constant0.<kernel>), in symbol order."""
    image = _open(cubin)
    sections = {s.index: s.name for s in image.sections}
    names = []
    for symbol in image.symbols():
        section = sections.get(symbol.section_index, "")
        if symbol.type == "STT_OBJECT" and (section.startswith(".nv.global") or (
                section.startswith(".nv.constant") and not section.startswith(".nv.constant0"))):
            names.append(symbol.name)
    return names


def _open(cubin: bytes) -> ElfImage:
    if not isinstance(cubin, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected the cubin's bytes, got {type(cubin).__name__}")
    image = ElfImage(bytes(cubin), CubinError, "cubin")
    if image.machine != EM_CUDA:
        raise CubinError(
            f"not a cubin: ELF machine {image.machine} (a cubin has EM_CUDA = {EM_CUDA}); "
            f"for a host binary or fatbin, take its cubins with ptx_passes.fatbin first"
        )
    return image


def _arch(image: ElfImage) -> int:
    # ELF ABI version 8 (CUDA 12.8+) keeps the sm arch in bits 8..15 of e_flags, older ones in bits 0..7.
    return (image.flags >> 8) & 0xFF if image.abi_version >= 8 else image.flags & 0xFF


def _records(image: ElfImage, section_name: str, required: bool) -> list[_Record]:
    section = image.section(section_name)
    if section is None:
        if required:
            raise CubinError(f"cubin has no {section_name} section")
        return []
    raw = bytes(image.data(section))
    records, at = [], 0
    while at < len(raw):
        if len(raw) - at < 4:
            raise CubinError(f"{section_name}: truncated EIATTR record at offset {at:#x}")
        fmt, attribute, value = struct.unpack_from("<BBH", raw, at)
        at += 4
        data = b""
        if fmt == EIFMT_SVAL:
            if at + value > len(raw):
                raise CubinError(
                    f"{section_name}: EIATTR {attribute:#x} at offset {at - 4:#x} claims {value} bytes of data, "
                    f"only {len(raw) - at} remain"
                )
            data, at = raw[at:at + value], at + value
        elif fmt not in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            raise CubinError(f"{section_name}: unknown EIATTR format {fmt:#x} at offset {at - 4:#x}")
        records.append(_Record(attribute, fmt, value, data))
    return records


def _module_records(image: ElfImage) -> dict[int, dict[int, int]]:
    """attribute -> {symbol index: value} from the module-wide .nv.info."""
    table: dict[int, dict[int, int]] = {}
    for record in _records(image, ".nv.info", required=False):
        if record.format == EIFMT_SVAL and len(record.data) == 8:
            symbol, value = struct.unpack("<II", record.data)
            table.setdefault(record.attribute, {})[symbol] = value
    return table


def _words(record: _Record | None, count: int, name: str) -> tuple[int, ...] | None:
    if record is None:
        return None
    if len(record.data) != 4 * count:
        raise CubinError(f"{name}: EIATTR {record.attribute:#x} has {len(record.data)} bytes, expected {4 * count}")
    return struct.unpack(f"<{count}I", record.data)


def _kernel(image: ElfImage, arch: int, name: str, symbol_index: int,
            records: list[_Record], per_symbol: dict[int, dict[int, int]]) -> KernelInfo:
    where = f".nv.info.{name}"
    first = {}
    for record in records:
        first.setdefault(record.attribute, record)

    params = []
    for record in records:
        if record.attribute != EIATTR_KPARAM_INFO:
            continue
        if len(record.data) != 12:
            raise CubinError(f"{where}: EIATTR_KPARAM_INFO has {len(record.data)} bytes, expected 12")
        _, ordinal, offset, w = struct.unpack("<IHHI", record.data)
        params.append((ordinal, offset, (w >> 18) & 0x3FFF))
    params.sort()
    if [p[0] for p in params] != list(range(len(params))):
        raise CubinError(f"{where}: parameter ordinals {[p[0] for p in params]} are not 0..{len(params) - 1}")

    cbank = _words(first.get(EIATTR_PARAM_CBANK), 2, where)
    total = first.get(EIATTR_CBANK_PARAM_SIZE)
    maxreg = first.get(EIATTR_MAXREG_COUNT)
    barriers = first.get(EIATTR_NUM_BARRIERS)
    max_threads = _words(first.get(EIATTR_MAX_THREADS), 3, where)
    required = _words(first.get(EIATTR_REQNTID), 3, where)
    cluster = _words(first.get(EIATTR_CTA_PER_CLUSTER), 3, where)
    return KernelInfo(
        name=name,
        params=[(offset, size) for _, offset, size in params],
        param_total=total.value if total is not None else 0,
        param_cbank_offset=cbank[1] & 0xFFFF if cbank is not None else None,
        registers=_registers(image, name, symbol_index, per_symbol),
        static_shared=_static_shared(image, arch, name),
        max_threads=max_threads,  # type: ignore[arg-type]
        required_threads=required,  # type: ignore[arg-type]
        max_registers=maxreg.value if maxreg is not None and maxreg.value != 0xFF else None,
        frame_size=per_symbol.get(EIATTR_FRAME_SIZE, {}).get(symbol_index, 0),
        barriers=barriers.value if barriers is not None else 0,
        uses_grid_sync=EIATTR_COOP_GROUP_INSTR_OFFSETS in first,
        cluster_dims=cluster,  # type: ignore[arg-type]
    )


def _registers(image: ElfImage, name: str, symbol_index: int, per_symbol: dict[int, dict[int, int]]) -> int | None:
    count = per_symbol.get(EIATTR_REGCOUNT, {}).get(symbol_index)
    if count is not None:
        return count
    text = image.section(f".text.{name}")
    if text is not None and text.info >> 24:
        return text.info >> 24  # older cubins: the count rides in sh_info's top byte
    return None


def _static_shared(image: ElfImage, arch: int, name: str) -> int:
    section = image.section(f".nv.shared.{name}")
    if section is None:
        return 0
    if arch >= 90:
        return max(section.size - RESERVED_SHARED_FROM_SM90, 0)
    return section.size
