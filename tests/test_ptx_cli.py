"""`python -m ptx_passes`: roundtrip, params (PTX, cubin, fatbin), extract, transform, errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ptx_corpus import CORPUS_DIR, compile_ptx, cuda_tool
from ptx_passes import cli, parse_module, print_module

STRUCT_PARAMS = CORPUS_DIR / "struct_params.cu"
KP_LINES = [
    "kp: 7 params, 105 bytes",
    "    0  offset     0  size     1  align   1  .u8  kp_param_0",
    "    1  offset     8  size    24  align   8  .b8[24]  kp_param_1",
    "    2  offset    32  size    16  align  16  .b8[16]  kp_param_2",
    "    3  offset    48  size     2  align   2  .u16  kp_param_3",
    "    4  offset    64  size    32  align  16  .b8[32]  kp_param_4",
    "    5  offset    96  size     8  align   8  .u64  kp_param_5",
    "    6  offset   104  size     1  align   1  .u8  kp_param_6",
]


@pytest.fixture
def kp_ptx(tmp_path) -> Path:
    path = tmp_path / "struct_params.ptx"
    path.write_text(compile_ptx(STRUCT_PARAMS, "sm_80"))
    return path


def _nvcc(tmp_path: Path, kind: str, *flags: str) -> Path:
    out = tmp_path / f"struct_params.{kind}"
    cmd = [cuda_tool("nvcc"), f"-{kind}", *flags, str(STRUCT_PARAMS), "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return out


def test_roundtrip_writes_the_printed_module(kp_ptx, tmp_path, capsys):
    out = tmp_path / "out.ptx"
    assert cli.main(["roundtrip", str(kp_ptx), "-o", str(out)]) == 0
    assert out.read_text() == print_module(parse_module(kp_ptx.read_text()))
    assert cli.main(["roundtrip", str(kp_ptx)]) == 0
    assert capsys.readouterr().out == out.read_text()


def test_params_of_ptx(kp_ptx, capsys):
    assert cli.main(["params", str(kp_ptx)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:8] == KP_LINES
    assert lines[8] == "affine: 3 params, 32 bytes"


def test_params_of_cubin(tmp_path, capsys):
    cubin = _nvcc(tmp_path, "cubin", "-arch=sm_80")
    assert cli.main(["params", str(cubin)]) == 0
    out = capsys.readouterr().out
    assert "== cubin sm_80" in out
    kp = out[out.index("kp: "):].splitlines()
    assert kp[0] == "kp: 7 params, 105 bytes"
    assert [line.split()[2] for line in kp[1:8]] == ["0", "8", "32", "48", "64", "96", "104"]


def test_params_and_extract_of_a_fatbin(tmp_path, capsys):
    fatbin = _nvcc(tmp_path, "fatbin", "-gencode", "arch=compute_80,code=[sm_80,compute_80]")
    assert cli.main(["params", str(fatbin)]) == 0
    out = capsys.readouterr().out
    assert "== cubin sm_80" in out and "== ptx sm_80" in out
    assert "\n".join(KP_LINES) in out
    out_dir = tmp_path / "entries"
    assert cli.main(["extract", str(fatbin), "-o", str(out_dir)]) == 0
    written = sorted(p.name for p in out_dir.iterdir())
    assert written == ["struct_params.0.sm_80.cubin", "struct_params.1.sm_80.ptx"]
    assert parse_module((out_dir / written[1]).read_text()).function("kp").params


def test_bad_ptx_is_one_line_with_position(tmp_path, capsys):
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 9.0\n.target sm_80\n.entry k()\n{\n\tmov.u32 %r1, ;\n}\n")
    assert cli.main(["roundtrip", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {bad}:5:15: expected an operand, found ';'\n"


@pytest.mark.parametrize("command", [["roundtrip"], ["params"], ["transform", "--pass", "ptb"]])
def test_missing_file(command, tmp_path, capsys):
    missing = tmp_path / "missing.ptx"
    assert cli.main(command + [str(missing)]) == 1
    assert capsys.readouterr().err == f"error: cannot read {missing}: No such file or directory\n"


def test_binary_garbage_is_reported(tmp_path, capsys):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\xff\xfe\x00garbage")
    assert cli.main(["params", str(junk)]) == 1
    assert "is neither PTX text (not UTF-8 at byte 0) nor a cubin/fatbin/ELF" in capsys.readouterr().err
    assert cli.main(["extract", str(junk), "-o", str(tmp_path / "x")]) == 1
    assert capsys.readouterr().err.startswith(f"error: {junk}: ")


def test_transform_without_the_pipeline_says_what_is_missing(kp_ptx, monkeypatch, capsys):
    # sys.modules[name] = None makes `import name` fail, as before the passes exist.
    monkeypatch.setitem(sys.modules, "ptx_passes.pipeline", None)
    assert cli.main(["transform", "--pass", "slicing", str(kp_ptx)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ptx_passes.pipeline is not available")
    assert "it is needed for the kernel transformations" in err


def test_transform_writes_variants_and_reports_them(tmp_path, capsys):
    source = tmp_path / "reduce.ptx"
    source.write_text(compile_ptx(CORPUS_DIR / "reduce_shared.cu", "sm_80"))
    out = tmp_path / "out.ptx"
    assert cli.main(["transform", "--pass", "slicing", "--pass", "ptb", str(source), "-o", str(out)]) == 0
    assert capsys.readouterr().err.splitlines() == ["reduce_sum: slicing -> reduce_sum__tally_slice",
                                                    "reduce_sum: ptb -> reduce_sum__tally_ptb"]
    entries = [e.name for e in parse_module(out.read_text()).entries()]
    assert entries == ["reduce_sum", "reduce_sum__tally_slice", "reduce_sum__tally_ptb"]
    result = subprocess.run([cuda_tool("ptxas"), "-arch=sm_80", str(out), "-o", "/dev/null"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_transform_reports_refusals(capsys, tmp_path):
    source = Path(__file__).resolve().parent / "data" / "ptx" / "all_syntax.ptx"
    assert cli.main(["transform", "--pass", "slicing", str(source), "-o", str(tmp_path / "o.ptx")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kernel: slicing refused: ")
    assert len(err[0]) > len("kernel: slicing refused: ")  # the reasons follow


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["transform", "--pass", "bogus", "x.ptx"])
    assert info.value.code == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_module_entry_point(kp_ptx):
    result = subprocess.run([sys.executable, "-m", "ptx_passes", "params", str(kp_ptx)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:8] == KP_LINES
