"""parse -> print round trip over the nvcc corpus (sm_80/sm_90, with and without -lineinfo, -G
for a few) and the committed Triton PTX: the printed PTX parses to an equal IR, ptxas accepts it,
and it assembles to the same cubin as the original (same SASS, same .nv.info, ...)."""
from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from ptx_corpus import HANDWRITTEN_PTX, TRITON_PTX, compile_many, compile_ptx, corpus_variants, cuda_tool
from ptx_passes import parse_module, print_module

VARIANTS = corpus_variants()


def _variant_id(variant) -> str:
    source, arch, flags = variant
    return "-".join([source.stem, arch, *(f.lstrip("-") for f in flags)])


@pytest.fixture(scope="session", autouse=True)
def _warm_corpus_cache():
    # Compile every variant up front, one nvcc per core, instead of one at a time per test.
    compile_many(VARIANTS)


def _assemble(ptxas: str, ptx_path: Path, arch: str, out: Path) -> bytes:
    cmd = [ptxas, f"-arch={arch}", str(ptx_path), "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stderr}"
    return out.read_bytes()


# With -lineinfo ptxas embeds the PTX text itself and a SASS-to-PTX-line table; those
# sections (and the relocations into the table) follow the text layout. Every other section
# must be byte-identical.
_PTX_TEXT_SECTIONS = (".nv_debug_ptx_txt", ".nv_debug_line_sass")


def _cubin_sections(cubin: bytes) -> list[tuple[str, bytes | int]]:
    elf = ELFFile(io.BytesIO(cubin))
    return [(s.name, s["sh_size"] if s["sh_type"] == "SHT_NOBITS" else s.data())
            for s in elf.iter_sections() if not s.name.endswith(_PTX_TEXT_SECTIONS)]


def _assembly_archs(module) -> list[str]:
    target = module.targets[0]
    if target.endswith("a"):  # sm_90a PTX assembles only for exactly that arch
        return [target]
    if target == "sm_80":
        return ["sm_80", "sm_90"]
    return [target]


def _check_round_trip(original: str, name: str, tmp_path: Path) -> None:
    module = parse_module(original, name)
    printed = print_module(module)
    reparsed = parse_module(printed, f"printed {name}")
    assert reparsed == module
    assert print_module(reparsed) == printed
    # bodies parsed at their first use (the emulator's way with big modules) read the same
    assert print_module(parse_module(original, name, lazy_bodies=True)) == printed

    # Same file name in two directories: debug cubins record the PTX file's name.
    ptxas = cuda_tool("ptxas")
    for kind, text in (("original", original), ("printed", printed)):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "kernel.ptx").write_text(text)
    for arch in _assembly_archs(module):
        want = _assemble(ptxas, tmp_path / "original" / "kernel.ptx", arch, tmp_path / f"original.{arch}.cubin")
        got = _assemble(ptxas, tmp_path / "printed" / "kernel.ptx", arch, tmp_path / f"printed.{arch}.cubin")
        assert _cubin_sections(got) == _cubin_sections(want), \
            f"printed PTX of {name} assembles to a different {arch} cubin"


@pytest.mark.parametrize("variant", VARIANTS, ids=_variant_id)
def test_corpus_round_trip(variant, tmp_path):
    source, arch, flags = variant
    _check_round_trip(compile_ptx(source, arch, flags), _variant_id(variant), tmp_path)


@pytest.mark.parametrize("path", TRITON_PTX + HANDWRITTEN_PTX, ids=lambda p: p.stem)
def test_committed_ptx_round_trip(path, tmp_path):
    _check_round_trip(path.read_text(), path.name, tmp_path)


def test_corpus_and_fixtures_are_present():
    assert len(VARIANTS) >= 22 * 4
    assert HANDWRITTEN_PTX
    assert {p.name for p in TRITON_PTX} >= {"vector_add.sm_80.ptx", "softmax.sm_90.ptx",
                                            "matmul.sm_80.ptx", "matmul.sm_90.ptx"}


def test_debug_variants_keep_debug_sections():
    source = next(s for s, _a, f in VARIANTS if f == ("-G",))
    module = parse_module(compile_ptx(source, "sm_80", ("-G",)))
    from ptx_passes import ir
    sections = [i.name for i in module.items if isinstance(i, ir.Section)]
    assert "debug_info" in sections and "debug_abbrev" in sections
    assert "debug" in module.targets


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_narrow_float_and_tensormap_instructions_round_trip(arch, tmp_path):
    # cvt to/from e4m3x2, e5m2x2 (and ue8m0x2 on sm_100a), max/min.NaN, tensormap.replace
    from e2e_helpers import PROGRAMS
    ptx = compile_ptx(PROGRAMS / "narrow_floats.cu", arch, (f"-I{PROGRAMS}",))
    assert "tensormap.replace" in ptx and "e4m3x2" in ptx and ("ue8m0x2" in ptx) == (arch == "sm_100a")
    _check_round_trip(ptx, f"narrow_floats-{arch}", tmp_path)
