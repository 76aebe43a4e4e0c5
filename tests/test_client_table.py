"""The client's driver entry-point table: generated from the CUDA headers, exported
as C symbols, and searched by cuGetProcAddress with the driver's version rules."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from client_helpers import CLIENT_LIBRARY, CUDA_HOME, ROOT, build_c, run_client

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_FOUND = 500
SUCCESS, SYMBOL_NOT_FOUND, VERSION_NOT_SUFFICIENT = 0, 1, 2


def test_generated_table_is_fresh():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_client_table.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def exported_symbols() -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(CLIENT_LIBRARY)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def declared_driver_symbols() -> set[str]:
    """What libcuda exports, read independently of the generator: the functions
    cuda.h and cudaProfiler.h declare when preprocessed as the driver's own build."""
    src = "#include <cuda.h>\n#include <cudaProfiler.h>\n"
    text = subprocess.run([os.environ.get("CC", "cc"), "-E", "-P", "-x", "c", f"-I{CUDA_HOME / 'include'}",
                           "-D__CUDA_API_VERSION_INTERNAL", "-"], input=src, capture_output=True, text=True,
                          check=True).stdout
    text = " ".join(text.split())
    return {m.group(2) for m in re.finditer(r"(static inline )?\bCUresult (cu\w+)\s*\(", text) if not m.group(1)}


def declared_cupti_symbols() -> set[str]:
    """The functions CUPTI's headers declare (cupti.h and what it includes)."""
    text = subprocess.run([os.environ.get("CC", "cc"), "-E", "-P", "-x", "c", f"-I{CUDA_HOME / 'include'}",
                           f"-I{CUDA_HOME / 'extras' / 'CUPTI' / 'include'}", "-"], input="#include <cupti.h>\n",
                          capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\bCUptiResult\s+(cupti\w+)\s*\(", " ".join(text.split())))


# What PyTorch's profiler (Kineto, in libtorch_cpu.so of torch 2.14) imports from libcupti.so.13.
KINETO_CUPTI_IMPORTS = {
    "cuptiActivityDisable", "cuptiActivityEnable", "cuptiActivityEnableCudaEventDeviceTimestamps",
    "cuptiActivityEnableDriverApi", "cuptiActivityEnableRuntimeApi", "cuptiActivityFlushAll",
    "cuptiActivityGetNextRecord", "cuptiActivityGetNumDroppedRecords", "cuptiActivityPopExternalCorrelationId",
    "cuptiActivityPushExternalCorrelationId", "cuptiActivityRegisterCallbacks",
    "cuptiActivityRegisterTimestampCallback", "cuptiActivitySetAttribute", "cuptiEnableCallback", "cuptiEnableDomain",
    "cuptiFinalize", "cuptiGetCallbackName", "cuptiGetResultString", "cuptiGetVersion", "cuptiSubscribe",
    "cuptiUnsubscribe"}


def test_library_exports_exactly_the_driver_symbols_and_its_own():
    exported = exported_symbols()
    declared = declared_driver_symbols()
    assert len(declared) > 600
    assert declared <= exported, f"missing: {sorted(declared - exported)[:20]}"
    extra = exported - declared
    # tally's CUPTI (src/cupti/): functions CUPTI declares, at least every one PyTorch's profiler calls
    cupti = {name for name in extra if name.startswith("cupti")}
    assert cupti <= declared_cupti_symbols(), sorted(cupti - declared_cupti_symbols())
    assert KINETO_CUPTI_IMPORTS <= cupti, sorted(KINETO_CUPTI_IMPORTS - cupti)
    # the dlopen hook, the device files' stand-ins (device_files.cpp), tally's own, NVRTC's
    # nvrtcGetCUBIN with the recorder tally's NVRTC stand-in calls, and nvJitLink's versioned
    # names (12.0 to 13.9) with the hooks tally's nvJitLink stand-in calls (src/jit_capture/)
    nvjitlink = {f"__nvJitLink{fn}_{major}_{minor}" for fn in ("Create", "AddData", "AddFile", "GetLinkedCubin",
                                                               "Destroy")
                 for major in (12, 13) for minor in range(10)}
    assert extra - cupti == {"dlopen", "stat", "stat64", "access", "tally_client_version", "tally_client_ping",
                             "tally_client_notify", "nvrtcGetCUBIN", "tally_client_record_nvrtc_cubin",
                             *nvjitlink, "tally_client_nvjitlink_created", "tally_client_nvjitlink_input",
                             "tally_client_nvjitlink_cubin", "tally_client_nvjitlink_destroyed"}
    for name in ("cuMemAlloc", "cuMemAlloc_v2", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuMemcpyHtoD_v2_ptds",
                 "cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable", "cuCtxGetDevice_v2",
                 "cuProfilerStart"):
        assert name in exported


def lookups(mode: str, *triples) -> tuple[dict, str]:
    """Runs proc_address; returns {(name, version, flags): (rc, status, fn)} and the trace."""
    prog = build_c("proc_address.c")
    args = [mode]
    for name, version, flags in triples:
        args += [name, version, flags]
    run = run_client(prog, *args)
    assert run.returncode == 0, run.stderr
    found = {}
    for line in run.lines("lookup "):
        m = re.fullmatch(r"(\S+) (-?\d+) (\d+) rc=(-?\d+) status=(-?\d+) fn=(null|set)", line)
        assert m, line
        found[(m.group(1), int(m.group(2)), int(m.group(3)))] = (int(m.group(4)), int(m.group(5)), m.group(6))
    return found, run


def chosen(trace: str, name: str, version: int, flags: int) -> str:
    m = re.search(rf"^tally-trace: cuGetProcAddress {name} {version} flags={flags} -> (\S+)", trace, re.M)
    assert m, f"no trace of {name} {version} {flags} in:\n{trace}"
    return m.group(1)


def test_version_selection_picks_the_newest_form_not_newer_than_asked():
    cases = [
        ("cuMemAlloc", 2000, 0, "cuMemAlloc"),          # the 32-bit original
        ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
        ("cuMemAlloc", 13000, 0, "cuMemAlloc_v2"),
        ("cuCtxGetDevice", 2000, 0, "cuCtxGetDevice"),
        ("cuCtxGetDevice", 12080, 0, "cuCtxGetDevice"),
        ("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"),   # (CUdevice*, CUcontext) since 13.0
        ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
        ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
        ("cuLaunchKernel", 13000, 1, "cuLaunchKernel"),
        ("cuLaunchKernel", 13000, 2, "cuLaunchKernel_ptsz"),     # per-thread default stream
        ("cuMemcpyHtoD", 13000, 2, "cuMemcpyHtoD_v2_ptds"),
        ("cuMemcpyHtoD", 4000, 2, "cuMemcpyHtoD_v2"),            # no ptds form that old: legacy
        ("cuStreamGetCaptureInfo", 11030, 2, "cuStreamGetCaptureInfo_v2_ptsz"),
        ("cuCtxCreate", 13000, 0, "cuCtxCreate_v4"),
        ("cuProfilerStart", 4000, 0, "cuProfilerStart"),
    ]
    found, run = lookups("v2", *[(n, v, f) for n, v, f, _ in cases])
    for name, version, flags, symbol in cases:
        assert found[(name, version, flags)] == (CUDA_SUCCESS, SUCCESS, "set"), name
        assert chosen(run.trace, name, version, flags).split()[0] == symbol, (name, version, flags)
    assert run.value("driver_version") == "13000 rc=0"


def test_missing_and_too_old_symbols_follow_the_v2_contract():
    found, run = lookups("v2", ("cuMemAlloc", 1000, 0), ("cuNoSuchFunction", 13000, 0),
                         ("cuGLInit", 2000, 0), ("cuCtxGetDevice", 13010, 0), ("cuInit", 2000, 4))
    # cuda.h: a missing or too-new symbol is CUDA_SUCCESS with a NULL pointer, and
    # the status says which; a version above the driver's or unknown flags are errors.
    assert found[("cuMemAlloc", 1000, 0)] == (CUDA_SUCCESS, VERSION_NOT_SUFFICIENT, "null")
    assert found[("cuNoSuchFunction", 13000, 0)] == (CUDA_SUCCESS, SYMBOL_NOT_FOUND, "null")
    assert found[("cuGLInit", 2000, 0)] == (CUDA_SUCCESS, SYMBOL_NOT_FOUND, "null")
    assert found[("cuCtxGetDevice", 13010, 0)][0] == CUDA_ERROR_INVALID_VALUE
    assert found[("cuInit", 2000, 4)][0] == CUDA_ERROR_INVALID_VALUE
    assert run.value("null_pfn") == str(CUDA_ERROR_INVALID_VALUE)


def test_first_form_reports_a_miss_as_not_found():
    found, _ = lookups("v1", ("cuMemAlloc", 3020, 0), ("cuNoSuchFunction", 13000, 0), ("cuMemAlloc", 1000, 0))
    assert found[("cuMemAlloc", 3020, 0)] == (CUDA_SUCCESS, -1, "set")
    assert found[("cuNoSuchFunction", 13000, 0)] == (CUDA_ERROR_NOT_FOUND, -1, "null")
    assert found[("cuMemAlloc", 1000, 0)] == (CUDA_ERROR_NOT_FOUND, -1, "null")


def test_lookups_without_trace_return_untraced_functions():
    prog = build_c("proc_address.c")
    run = run_client(prog, "v2", "cuDriverGetVersion", 2020, 0, trace=False)
    assert run.returncode == 0, run.stderr
    assert run.value("driver_version") == "13000 rc=0"
    assert run.trace == "" and "tally-trace" not in run.stderr


def test_every_unsupported_entry_point_has_its_reason():
    # tools/unsupported_reasons.py decides each one; the generator fails on one it does not
    # (test_generated_files_are_current runs it), and the docs list them by reason
    sys.path.insert(0, str(ROOT / "tools"))
    from unsupported_reasons import RULES, reason_for
    assert reason_for("cuNoSuchFunction", 12000, None) is None          # a new refusal needs a decision
    assert "older ABI" in reason_for("cuMemAlloc", 2000, 3020) and "32-bit" in reason_for("cuMemAlloc", 2000, 3020)
    assert all(rule.reason and not rule.reason.endswith(".") for rule in RULES)
    doc = (ROOT / "docs" / "unsupported-entry-points.md").read_text()
    generated = (ROOT / "client_preload" / "src" / "generated" / "unsupported_entries.cpp").read_text()
    refused = generated.count("unsupported_entry(logged,")
    assert f"{refused} of the" in doc and "| reason | entry points |" in doc
