"""The dlopen hook: a job that opens the real driver by absolute path gets tally's
library (when tally-run LD_PRELOADs it); with JIT capture on, one that opens NVRTC
gets tally's stand-in in front of it; every other dlopen is untouched, searched as
its caller's own."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from client_helpers import LIB_DIR, SOURCES, build_c, run_client

DRIVER_PATHS = ["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so", "libcuda.so",
                "/opt/nvidia/libcuda.so.580.65.06"]


@pytest.mark.parametrize("path", DRIVER_PATHS)
def test_opening_the_real_driver_lands_on_tally(path):
    run = run_client(build_c("dlopen_driver.c"), path)
    assert run.returncode == 0, run.stderr
    assert run.value("driver_handle") == "set"
    assert run.value("get_version_rc") == "0 version=13000"
    assert run.value("tally").startswith("tally-client")
    assert run.value("libm_cos0") == "1"
    assert run.value("missing") == "null"


def test_other_names_are_not_taken_for_the_driver():
    run = run_client(build_c("dlopen_driver.c"), "/nonexistent/libcudart.so.13")
    assert run.value("driver_handle") != "set"
    run = run_client(build_c("dlopen_driver.c"), "/nonexistent/libcuda.so.1x")
    assert run.value("driver_handle") != "set"


@pytest.fixture(scope="module")
def runpath_libraries(tmp_path_factory):
    """libouter.so whose RUNPATH is $ORIGIN/inner, inner/libsibling.so, and libnorunpath.so
    (the same code without a RUNPATH: what the caller's search path decides)."""
    root = tmp_path_factory.mktemp("runpath")
    (root / "inner").mkdir()
    cc = os.environ.get("CC", "cc")
    shared = [cc, "-O1", "-shared", "-fPIC"]
    subprocess.run([*shared, str(SOURCES / "runpath_sibling.c"), "-o", str(root / "inner" / "libsibling.so")],
                   check=True)
    subprocess.run([*shared, str(SOURCES / "runpath_outer.c"), "-o", str(root / "libouter.so"),
                    "-Wl,--enable-new-dtags,-rpath,$ORIGIN/inner", "-ldl"], check=True)
    subprocess.run([*shared, str(SOURCES / "runpath_outer.c"), "-o", str(root / "libnorunpath.so"), "-ldl"],
                   check=True)
    return root


def test_a_library_opening_another_by_bare_name_searches_its_own_runpath(runpath_libraries):
    """tally's dlopen passes the call on as a tail call, so libc sees the library that
    called, not tally's, and searches that library's RUNPATH."""
    program = build_c("dlopen_runpath.c")
    for preload in (True, False):
        run = run_client(program, runpath_libraries / "libouter.so", "libsibling.so", "sibling_answer",
                         preload=preload)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.value("opened") == "set", run.stdout
        assert run.value("sibling_answer") == str(runpath_libraries / "inner" / "libsibling.so")
    # the same call from a library without that RUNPATH finds nothing: the search is the caller's
    run = run_client(program, runpath_libraries / "libnorunpath.so", "libsibling.so")
    assert run.value("opened").startswith("null")


def open_with_and_without_capture(runpath_libraries, real_library: Path, records: Path, *names: str):
    """A library with a RUNPATH dlopens `real_library` by its soname (a link to it in the
    RUNPATH folder) and looks `names` up in the handle, with JIT capture on and off; both
    runs, each having opened it, and the real library's path."""
    link = runpath_libraries / "inner" / real_library.name
    if not link.exists():
        link.symlink_to(real_library)
    program = build_c("dlopen_runpath.c")
    args = (runpath_libraries / "libouter.so", real_library.name, *names)
    on = run_client(program, *args, env={"TALLY_JIT_CAPTURE_DIR": str(records)})
    assert on.returncode == 0, on.stdout + on.stderr
    off = run_client(program, *args)
    assert on.value("opened") == off.value("opened") == "set", on.stdout + off.stdout
    return on, off, str(link)


def test_nvrtc_opened_with_jit_capture_gets_tallys_stand_in_in_front_of_it(runpath_libraries, nvrtc_home,
                                                                           tmp_path):
    """With JIT capture on, a library that dlopens NVRTC by soname from its RUNPATH gets
    tally's libtally-nvrtc.so.13: nvrtcGetCUBIN is tally's, every other name NVRTC's own.
    With capture off it gets NVRTC itself."""
    on, off, real = open_with_and_without_capture(runpath_libraries, nvrtc_home / "lib" / "libnvrtc.so.13",
                                                  tmp_path / "records", "nvrtcGetCUBIN", "nvrtcVersion",
                                                  "nvrtcGetPTX")
    assert on.value("nvrtcGetCUBIN") == str(LIB_DIR / "libtally-nvrtc.so.13")
    assert on.value("nvrtcVersion") == real and on.value("nvrtcGetPTX") == real
    assert "jit capture: dlopen(libnvrtc.so.13) from " + str(runpath_libraries / "libouter.so") in on.trace
    assert off.value("nvrtcGetCUBIN") == off.value("nvrtcVersion") == real


def test_nvjitlink_opened_with_jit_capture_gets_tallys_stand_in_in_front_of_it(runpath_libraries, nvjitlink_home,
                                                                               tmp_path):
    """The same for nvJitLink: libtally-nvjitlink.so.13 defines the calls JIT capture follows
    (plain and versioned names), every other name is nvJitLink's own."""
    on, off, real = open_with_and_without_capture(runpath_libraries, nvjitlink_home / "lib" / "libnvJitLink.so.13",
                                                  tmp_path / "records", "nvJitLinkCreate", "__nvJitLinkAddData_13_0",
                                                  "nvJitLinkGetLinkedCubin", "nvJitLinkComplete", "nvJitLinkVersion")
    stand_in = str(LIB_DIR / "libtally-nvjitlink.so.13")
    assert on.value("nvJitLinkCreate") == on.value("__nvJitLinkAddData_13_0") == stand_in
    assert on.value("nvJitLinkGetLinkedCubin") == stand_in
    assert on.value("nvJitLinkComplete") == real and on.value("nvJitLinkVersion") == real
    assert off.value("nvJitLinkCreate") == off.value("nvJitLinkVersion") == real
