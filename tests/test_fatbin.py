"""ptx_passes.fatbin on fatbins, host binaries and cubins that nvcc builds here at test time."""
from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptx_passes.cubin_info import kernel_params
from ptx_passes.fatbin import (
    FatbinEntry,
    FatbinError,
    cubins_of,
    extract,
    fatbin_size,
    parse_wrapper,
    ptx_of,
    read_fatbin_entries,
    wrapped_fatbins,
)
from binary_damage import damaged_copy

SOURCE = Path(__file__).parent / "cuda" / "fatbin" / "kernels.cu"
MULTI_ARCH = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]


@pytest.fixture(scope="session")
def build(nvcc, tmp_path_factory):
    """nvcc SOURCE with the given flags into a file cached for the session by content hash."""
    cache = tmp_path_factory.mktemp("nvcc-fatbin")

    def run(*flags: str, suffix: str, source: Path = SOURCE) -> Path:
        key = hashlib.sha256(source.read_bytes() + "\0".join(flags).encode()).hexdigest()[:16]
        out = cache / f"{SOURCE.stem}-{key}{suffix}"
        if not out.exists():
            command = [nvcc, *flags, str(source), "-o", str(out)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.fail(f"{' '.join(command)} failed:\n{done.stderr}")
        return out

    return run


@pytest.fixture(scope="session")
def zstd_fatbin(build) -> Path:
    return build("-fatbin", "-arch=sm_80", suffix=".fatbin")


@pytest.fixture(scope="session")
def lz4_fatbin(build) -> Path:
    return build("-fatbin", "-arch=sm_80", "--compress-mode=speed", suffix=".fatbin")


@pytest.fixture(scope="session")
def raw_fatbin(build) -> Path:
    return build("-fatbin", "-arch=sm_80", "--no-compress", suffix=".fatbin")


@pytest.fixture(scope="session")
def multi_fatbin(build) -> Path:
    return build("-fatbin", *MULTI_ARCH, suffix=".fatbin")


@pytest.fixture(scope="session")
def object_file(build) -> Path:
    return build("-c", "-arch=sm_80", suffix=".o")


@pytest.fixture(scope="session")
def executable(build, object_file) -> Path:
    # What `nvcc -o prog kernels.cu` does, minus compiling the device code a second time.
    return build("-arch=sm_80", suffix=".exe", source=object_file)


def ptx_lines(text: str) -> list[str]:
    """PTX with comments dropped and whitespace collapsed: fatbins store it minified that way."""
    return [" ".join(line.split("//", 1)[0].split()) for line in text.splitlines()]


def kinds(entries: list[FatbinEntry]) -> list[tuple[str, int]]:
    return [(e.kind, e.arch) for e in entries]


# --- compression and PTX ----------------------------------------------------------------------

def test_every_compression_mode_gives_the_ptx_nvcc_prints(zstd_fatbin, lz4_fatbin, raw_fatbin, build):
    texts = {}
    for path, method, flag in [(zstd_fatbin, "zstd", 0x8000), (lz4_fatbin, "lz4", 0x2000), (raw_fatbin, None, 0)]:
        entries = read_fatbin_entries(path)
        assert kinds(entries) == [("cubin", 80), ("ptx", 80)]
        ptx_entry = entries[1]
        assert ptx_entry.compressed == method
        assert ptx_entry.flags & 0xA000 == flag
        assert ptx_entry.version == (9, 0)  # PTX ISA of nvcc 13
        assert not ptx_entry.payload.endswith(b"\0")
        texts[method] = ptx_of(entries)
    assert texts["zstd"] == texts["lz4"] == texts[None]
    assert ".entry _Z2kpc5Mixed6float4s4FivePKib(" in texts["zstd"]
    printed = build("-ptx", "-arch=sm_80", suffix=".ptx").read_text()
    assert ptx_lines(texts["zstd"]) == ptx_lines(printed)


def test_fatbin_cubin_is_the_cubin_nvcc_writes(zstd_fatbin, build):
    cubin = build("-cubin", "-arch=sm_80", suffix=".cubin").read_bytes()
    from_fatbin = read_fatbin_entries(zstd_fatbin)[0]
    assert cubins_of(read_fatbin_entries(zstd_fatbin)) == {80: cubin}
    bare = read_fatbin_entries(cubin)
    assert len(bare) == 1
    assert (bare[0].kind, bare[0].arch, bare[0].version, bare[0].payload) == ("cubin", 80, from_fatbin.version, cubin)


def test_several_archs_list_every_entry(multi_fatbin):
    entries = read_fatbin_entries(multi_fatbin)
    assert kinds(entries) == [("cubin", 80), ("cubin", 90), ("ptx", 90)]
    assert sorted(cubins_of(entries)) == [80, 90]
    assert ".target sm_90" in ptx_of(entries)
    assert entries[0].offset == 16  # first entry right after the fatbin header
    assert all(e.fatbin_offset == 0 for e in entries)


def test_sass_only_fatbin_has_no_ptx(build):
    entries = read_fatbin_entries(build("-fatbin", "-gencode", "arch=compute_80,code=sm_80", suffix=".fatbin"))
    assert kinds(entries) == [("cubin", 80)]
    assert ptx_of(entries) is None


def _ptx(arch: int, text: str) -> FatbinEntry:
    return FatbinEntry("ptx", arch, (9, 0), 0, None, text.encode(), 0)


def test_ptx_of_prefers_highest_arch_not_above_the_device():
    entries = [_ptx(70, "seventy"), _ptx(90, "ninety"), _ptx(80, "eighty")]
    assert ptx_of(entries, prefer_arch=86) == "eighty"
    assert ptx_of(entries, prefer_arch=90) == "ninety"
    assert ptx_of(entries, prefer_arch=60) == "ninety"  # nothing fits: the newest there is
    assert ptx_of(entries) == "ninety"
    assert ptx_of([]) is None


def test_ambiguous_choice_is_an_error_not_a_guess():
    with pytest.raises(FatbinError, match="2 different PTX entries for sm_80"):
        ptx_of([_ptx(80, "one"), FatbinEntry("ptx", 80, (9, 0), 0, None, b"two", 0, 4096)])


# --- host binaries ------------------------------------------------------------------------------

def test_executables_and_objects_carry_the_same_ptx(zstd_fatbin, object_file, executable, build):
    expected = ptx_of(read_fatbin_entries(zstd_fatbin))
    shared = build("-arch=sm_80", "-cudart", "shared", suffix=".exe", source=object_file)
    for binary in (object_file, executable, shared):
        entries = read_fatbin_entries(binary)
        assert ptx_of(entries) == expected, binary.name
        assert entries[-1].fatbin_offset > 0  # offsets are file offsets
    # The object's one fatbin is byte for byte what nvcc -fatbin writes.
    assert wrapped_fatbins(object_file) == [zstd_fatbin.read_bytes()]


def test_relocatable_object_is_read_through_its_wrapper(build):
    # -rdc objects keep the fatbin in __nv_relfatbin (no .nv_fatbin) and compress their cubins.
    rdc_object = build("-rdc=true", "-c", "-arch=sm_80", suffix=".o")
    with rdc_object.open("rb") as f:
        names = {section.name for section in ELFFile(f).iter_sections()}
    assert "__nv_relfatbin" in names and ".nv_fatbin" not in names
    entries = read_fatbin_entries(rdc_object)
    assert [(e.kind, e.arch, e.compressed) for e in entries] == [("cubin", 80, "zstd"), ("ptx", 80, "zstd")]
    layout = kernel_params(cubins_of(entries)[80])["_Z2kpc5Mixed6float4s4FivePKib"]
    assert layout == [(0, 1), (8, 24), (32, 16), (48, 2), (64, 32), (96, 8), (104, 1)]
    assert ".entry _Z2kpc5Mixed6float4s4FivePKib(" in ptx_of(entries)


def test_linked_executable_has_a_second_fatbin(executable):
    # nvcc's link step adds a small sm_80 cubin of its own in front of the program's fatbin.
    entries = read_fatbin_entries(executable)
    assert kinds(entries) == [("cubin", 80), ("cubin", 80), ("ptx", 80)]
    assert len({e.fatbin_offset for e in entries}) == 2
    with pytest.raises(FatbinError, match="filter on FatbinEntry.fatbin_offset"):
        cubins_of(entries)
    program = [e for e in entries if e.fatbin_offset == entries[-1].fatbin_offset]
    assert sorted(cubins_of(program)) == [80]


def test_wrappers_resolve_to_the_fatbins_in_nv_fatbin(executable, tmp_path):
    with executable.open("rb") as f:
        elf = ELFFile(f)
        section = elf.get_section_by_name(".nv_fatbin")
        fatbin_bytes, fatbin_addr = section.data(), section["sh_addr"]
        segment = elf.get_section_by_name(".nvFatBinSegment").data()
    resolved = wrapped_fatbins(executable)
    assert b"".join(resolved) == fatbin_bytes
    # What the server does with a wrapper from a client: follow the pointer, size the fatbin, read it.
    starts = []
    for at in range(0, len(segment), 24):
        magic, version, pointer = parse_wrapper(segment[at:at + 24])
        assert (magic, version in (1, 2)) == (0x466243B1, True)
        start = pointer - fatbin_addr
        starts.append(start)
        size = fatbin_size(fatbin_bytes[start:start + 16])
        assert fatbin_bytes[start:start + size] == resolved[len(starts) - 1]
    assert starts[0] == 0
    # Without the .nv_fatbin name the reader falls back to following the wrappers.
    renamed = tmp_path / "renamed.exe"
    objcopy = shutil.which("objcopy")
    assert objcopy, "objcopy (binutils) is needed; nvcc's host linking needs binutils too"
    subprocess.run([objcopy, "--rename-section", ".nv_fatbin=.rodata_fatbin", str(executable), str(renamed)],
                   check=True)
    assert kinds(read_fatbin_entries(renamed)) == kinds(read_fatbin_entries(executable))
    assert ptx_of(read_fatbin_entries(renamed)[1:]) == ptx_of(read_fatbin_entries(executable)[1:])


def test_extract_writes_each_entry(multi_fatbin, tmp_path):
    paths = extract(multi_fatbin, tmp_path / "out")
    stem = multi_fatbin.stem
    assert [p.name for p in paths] == [f"{stem}.0.sm_80.cubin", f"{stem}.1.sm_90.cubin", f"{stem}.2.sm_90.ptx"]
    entries = read_fatbin_entries(multi_fatbin)
    assert [p.read_bytes() for p in paths] == [e.payload for e in entries]
    assert read_fatbin_entries(paths[2])[0].arch == 90  # an extracted PTX file reads back as PTX


# --- errors -------------------------------------------------------------------------------------

def _patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def test_wrapper_and_header_errors():
    with pytest.raises(FatbinError, match="needs 16 bytes"):
        parse_wrapper(b"\xb1\x43\x62\x46")
    with pytest.raises(FatbinError, match="bad __fatBinC_Wrapper_t magic"):
        parse_wrapper(bytes(24))
    with pytest.raises(FatbinError, match="truncated fatbin header"):
        fatbin_size(b"\x50\xed\x55\xba\x01\x00")
    with pytest.raises(FatbinError, match="bad fatbin magic"):
        fatbin_size(bytes(16))
    with pytest.raises(FatbinError, match="parse_wrapper"):
        read_fatbin_entries(struct.pack("<IIQQ", 0x466243B1, 1, 0x1000, 0))


def test_malformed_fatbins_are_rejected_with_the_reason(zstd_fatbin, lz4_fatbin, tmp_path):
    good = zstd_fatbin.read_bytes()
    ptx_at = read_fatbin_entries(good)[1].offset
    cases = {
        "truncated fatbin header": good + b"\x50\xed\x55\xba",
        "bad fatbin magic": good + b"\x01" * 16,
        "claims": good[:-8],  # body shorter than the header says
        "runs past the end": _patch(good, 16 + 8, "<Q", 1 << 40),
        "truncated entry header": _patch(good[:16 + 32], 8, "<Q", 32),
        "unknown compression flag": _patch(good, ptx_at + 0x28, "<Q", 0x1011),
        "zstd decompression failed": good[:ptx_at + 80] + b"\x00" * 8 + good[ptx_at + 88:],
        "decompressed to": _patch(good, ptx_at + 0x38, "<Q", 5),
        "not an ELF image": good[:0x50] + b"junk" + good[0x54:],
    }
    for reason, data in cases.items():
        with pytest.raises(FatbinError, match=reason):
            read_fatbin_entries(data)
    lz4 = lz4_fatbin.read_bytes()
    lz4_at = read_fatbin_entries(lz4)[1].offset
    with pytest.raises(FatbinError, match="lz4 decompression failed"):
        read_fatbin_entries(lz4[:lz4_at + 80] + b"\xff" * 16 + lz4[lz4_at + 96:])
    with pytest.raises(FatbinError, match="cannot read"):
        read_fatbin_entries(tmp_path / "missing.fatbin")
    with pytest.raises(FatbinError, match="not a fatbin, ELF image or PTX"):
        read_fatbin_entries(b"hello world")


def test_elf_without_device_code_is_rejected():
    with pytest.raises(FatbinError, match="carries no CUDA device code"):
        read_fatbin_entries(Path(sys.executable).resolve())


# --- robustness ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def samples(zstd_fatbin, lz4_fatbin, multi_fatbin, object_file) -> list[tuple[bytes, list[int]]]:
    """Inputs to damage, each with the offsets worth hitting (headers), beside random ones."""
    out = []
    for path in (zstd_fatbin, lz4_fatbin, multi_fatbin):
        data = path.read_bytes()
        out.append((data, [0, 8] + [o for e in read_fatbin_entries(data) for o in (e.offset, e.offset + 0x28)]))
    data = object_file.read_bytes()
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    out.append((data, [0x10, 0x28, 0x3C, shoff] + [e.offset for e in read_fatbin_entries(data)]))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_input_raises_only_fatbin_error(samples, data):
    blob, hot = data.draw(st.sampled_from(samples))
    damaged = damaged_copy(data, blob, hot, span=80)
    try:
        entries = read_fatbin_entries(damaged)
    except FatbinError as exc:
        assert str(exc)
        return
    for entry in entries:
        assert entry.kind in ("ptx", "cubin")
