"""tools/driver_census.py without its downloads: the entry-table parser on the real
generated table, the name normalization, and the scan and comparison on a tiny shared
object and byte blobs made here."""
from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import driver_census as census  # noqa: E402

GENERATED = ROOT / "client_preload" / "src" / "generated"


def test_parser_reads_every_row_of_the_real_table():
    rows = census.parse_table((GENERATED / "entry_table.cpp").read_text())
    count = int(re.search(r"kEntryCount = (\d+);", (GENERATED / "entry_points.h").read_text())[1])
    assert len(rows) == count
    # unsupported_entries.cpp has one refusal per unimplemented row: an independent count
    refused = (GENERATED / "unsupported_entries.cpp").read_text().count("unsupported_entry(logged,")
    assert sum(not r.implemented for r in rows) == refused
    assert sum(r.implemented for r in rows) == count - refused
    table = census.Table(rows)
    assert table.status("cuInit") == "implemented"
    assert table.status("cuTexRefSetAddress") == "NOT_SUPPORTED"
    assert table.status("cuNoSuchFunction") == "unknown"
    # the row a CUDA 13 library gets is the newest default-stream one
    assert table.served("cuMemAlloc").version == 3020 and table.served("cuMemAlloc").symbol == "cuMemAlloc_v2"


def test_names_reduce_to_what_cuGetProcAddress_is_asked_for():
    assert census.base_name("cuMemAlloc_v2") == "cuMemAlloc"
    assert census.base_name("cuMemcpyAsync_ptsz") == "cuMemcpyAsync"
    assert census.base_name("cuMemcpy_ptds") == "cuMemcpy"
    assert census.base_name("cuStreamBatchMemOp_v2_ptsz") == "cuStreamBatchMemOp"
    assert census.base_name("cuStreamWaitValue32") == "cuStreamWaitValue32"   # a digit, not a version
    assert census.driver_names({"cuInit", "cuCtxGetCurrent_t", "cuMemAlloc_v2", "cuMemAlloc"}) == ["cuInit",
                                                                                                 "cuMemAlloc"]
    src = 'typedef CUresult (*cuLaunchKernelEx_t)(void); cuLaunchKernelEx_t cuLaunchKernelExHandle = ' \
          'dlsym(h, "cuLaunchKernelEx"); cudaMalloc(); cuInit(0);'
    assert census.driver_names(census.names_in_source(src)) == ["cuInit", "cuLaunchKernelEx"]


def test_blob_scan_takes_whole_strings_across_chunk_edges(monkeypatch):
    blob = (b"\x7fELF\x00cuInit\x00cuMemAlloc_v2\x00\x00call cuDeviceGet failed\x00xcuCtxCreate\x00"
            + b"\x00" * 37 + b"cuStreamWaitValue32_ptsz\x00cuda\x00cuNotEnded")
    want = {"cuInit", "cuMemAlloc_v2", "cuStreamWaitValue32_ptsz"}
    assert census.names_in_blob(io.BytesIO(blob)) == want
    monkeypatch.setattr(census, "CHUNK", 5)     # every name cut by some chunk edge
    monkeypatch.setattr(census, "OVERLAP", 40)
    assert census.names_in_blob(io.BytesIO(blob)) == want
    # a window that starts inside a string does not count its tail as a name
    assert census.names_in_blob(io.BytesIO(blob), start=6, length=20) == {"cuMemAlloc_v2"}


def test_a_shared_object_in_a_wheel_against_a_table(tmp_path):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the sample shared object")
    (tmp_path / "lib.c").write_text(
        'const char *const kNames[] = {"cuInit", "cuMemAlloc_v2", "cuStreamWaitValue32_ptsz",\n'
        '                              "cuBrandNew", "cuCtxGetCurrent_t", "an error in cuDeviceGet"};\n'
        'const char *name(int i) { return kNames[i]; }\n')
    so = tmp_path / "libsample.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(tmp_path / "lib.c")], check=True)
    wheel_path = tmp_path / "sample-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel_path, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.write(so, "sample/lib/libsample.so")
    with zipfile.ZipFile(wheel_path) as wheel:
        tokens = census.names_in_member(wheel, "sample/lib/libsample.so", tmp_path)
    assert {"cuInit", "cuMemAlloc_v2", "cuStreamWaitValue32_ptsz", "cuBrandNew"} <= tokens
    assert not list(tmp_path.glob("tmp*.so"))           # the copied-out object is gone

    table = census.Table(census.parse_table(
        '    {"cuInit", 2000, false, true, "cuInit", nullptr, nullptr},\n'
        '    {"cuMemAlloc", 2000, false, false, "cuMemAlloc", nullptr, nullptr},\n'
        '    {"cuMemAlloc", 3020, false, true, "cuMemAlloc_v2", nullptr, nullptr},\n'
        '    {"cuStreamWaitValue32", 8000, false, false, "cuStreamWaitValue32", nullptr, nullptr},\n'
        '    {"cuStreamWaitValue32", 8000, true, false, "cuStreamWaitValue32_ptsz", nullptr, nullptr},\n'))
    result = census.compare(tokens, table)
    assert (result["named"], result["implemented"], result["NOT_SUPPORTED"], result["unknown"]) == (4, 2, 1, 1)
    assert result["not_supported_names"] == ["cuStreamWaitValue32"]
    assert result["unknown_names"] == ["cuBrandNew"]
    assert result["unknown_undeclared"] == []                # no headers given: nothing to split by


def test_unknown_names_split_by_what_cudas_headers_declare(tmp_path):
    wheel_path = tmp_path / "runtime-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel_path, "w") as wheel:
        wheel.writestr("nvidia/cu13/include/cudaTypedefs.h",
                       "#define PFN_cuMemAlloc PFN_cuMemAlloc_v3020\n"
                       "typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v3020)(CUdeviceptr *dptr, size_t bytesize);\n"
                       "typedef CUresult (CUDAAPI *PFN_cuMemcpyAsync_v4000_ptsz)(void);\n"
                       "typedef CUresult (CUDAAPI *PFN_cuStreamWaitValue32_v8000)(void);\n")
        wheel.writestr("nvidia/cu13/include/cuda.h", "CUresult CUDAAPI cuBrandNew_v2(int x);\n")
        wheel.writestr("nvidia/cu13/include/other.h", "typedef CUresult (CUDAAPI *PFN_cuNotRead_v1000)(void);\n")
    declared = census.declared_names(wheel_path)
    assert declared == {"cuMemAlloc", "cuMemcpyAsync", "cuStreamWaitValue32", "cuBrandNew"}
    table = census.Table(census.parse_table('    {"cuInit", 2000, false, true, "cuInit", nullptr, nullptr},\n'))
    result = census.compare({"cuInit", "cuBrandNew", "cuBLAS"}, table, declared)
    assert result["unknown_names"] == ["cuBLAS", "cuBrandNew"] and result["unknown_undeclared"] == ["cuBLAS"]
