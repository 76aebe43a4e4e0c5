"""tools/cuda_samples.py on a small snapshot laid out as NVIDIA's cuda-samples is
(our own sample programs, committed to a git repository whose bare directory is
the snapshot): samples built as their CMakeLists.txt says, a driver-API sample's
fatbin included, run under tally-run on the emulator, and the table's verdicts."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CMAKE = """\
cmake_minimum_required(VERSION 3.20)
project({name} LANGUAGES C CXX CUDA)
include_directories(../../../Common)
add_executable({name} {sources})
target_link_libraries({name} PUBLIC
    {libs}
)
{extra}
"""

RUNTIME_SAMPLE = r"""
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include "helper_mini.h"
__global__ void add_one(int* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += 1; }
int main(int argc, char** argv) {
  if (SLEEP_SECONDS) sleep(SLEEP_SECONDS);
  int n = 1000, *d, h[1000] = {0};
  cudaMalloc(&d, sizeof h);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  add_one<<<4, 256>>>(d, n);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  int ok = 1;
  for (int i = 0; i < n; ++i) ok &= h[i] == 1;
  if (!ok || WANT_FAILURE) { printf("Test failed: wrong sum\n"); return EXIT_FAILURE; }
  printf("Test passed\n");
  return EXIT_SUCCESS;
}
"""

DRIVER_KERNEL = 'extern "C" __global__ void add_two(int* a, int n) { int i = threadIdx.x; if (i < n) a[i] += 2; }\n'
DRIVER_SAMPLE = r"""
#include <cstdio>
#include <cuda.h>
#include <fstream>
#include <sstream>
int main() {
  std::ifstream file("mini_kernel64.fatbin", std::ios::binary);   // next to the executable, as the samples expect
  std::stringstream image;
  image << file.rdbuf();
  CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn; CUdeviceptr d;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuModuleLoadData(&mod, image.str().c_str()) || cuModuleGetFunction(&fn, mod, "add_two"))
    { printf("driver setup failed\n"); return 1; }
  int h[32] = {0}, n = 32;
  cuMemAlloc(&d, sizeof h);
  cuMemcpyHtoD(d, h, sizeof h);
  void* args[] = {&d, &n};
  cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr);
  cuMemcpyDtoH(h, d, sizeof h);
  for (int i = 0; i < n; ++i) if (h[i] != 2) { printf("Test failed\n"); return 1; }
  printf("Test passed\n");
  return 0;
}
"""


def add_sample(tree: Path, name: str, files: dict[str, str], libs: str = "", extra: str = "") -> None:
    directory = tree / "Samples" / "0_Introduction" / name
    directory.mkdir(parents=True)
    for file, text in files.items():
        (directory / file).write_text(text)
    sources = " ".join(f for f in files if f.endswith((".cu", ".cpp")) and "kernel" not in f)
    (directory / "CMakeLists.txt").write_text(CMAKE.format(name=name, sources=sources, libs=libs, extra=extra))


def make_snapshot(root: Path) -> Path:
    tree = root / "samples"
    (tree / "Common").mkdir(parents=True)
    (tree / "Common" / "helper_mini.h").write_text("#define HELPER_MINI 1\n")
    runtime = lambda sleep, fail: {"main.cu": f"#define SLEEP_SECONDS {sleep}\n#define WANT_FAILURE {fail}\n"
                                   + RUNTIME_SAMPLE}
    add_sample(tree, "miniRuntime", runtime(0, 0))
    add_sample(tree, "miniFails", runtime(0, 1))
    add_sample(tree, "miniSleeps", runtime(60, 0))
    add_sample(tree, "miniNeedsGL", runtime(0, 0), libs="GLUT::GLUT")
    add_sample(tree, "miniDrv", {"miniDrv.cpp": DRIVER_SAMPLE, "mini_kernel.cu": DRIVER_KERNEL},
               libs="CUDA::cuda_driver", extra=textwrap.dedent("""\
                   set(CUDA_FATBIN_FILE "${CMAKE_CURRENT_BINARY_DIR}/mini_kernel64.fatbin")
                   set(CUDA_KERNEL_SOURCE "${CMAKE_CURRENT_SOURCE_DIR}/mini_kernel.cu")
                   """))
    (tree / "test_args.json").write_text('{"miniSkipped": {"skip": true}}\n')
    add_sample(tree, "miniSkipped", runtime(0, 0))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tree)]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "snapshot"]):
        subprocess.run(git + cmd, check=True)
    return tree / ".git"


@pytest.mark.slow   # about 20 s: nvcc builds four programs
def test_builds_runs_and_tabulates_a_snapshot(tmp_path):
    snapshot = make_snapshot(tmp_path)
    out = tmp_path / "table.md"
    names = "miniRuntime,miniDrv,miniFails,miniSleeps,miniNeedsGL,miniSkipped,miniMissing"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "cuda_samples.py"), str(snapshot), "--samples", names,
                           "--timeout", "5", "--work", str(tmp_path / "work"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.read_text().splitlines() if line.startswith("| mini")}
    verdicts = {name: (row[0], row[1]) for name, row in rows.items()}
    assert verdicts == {
        "miniRuntime": ("ok", "pass"), "miniDrv": ("ok", "pass"), "miniFails": ("ok", "fail"),
        "miniSleeps": ("ok", "timeout"), "miniNeedsGL": ("failed", "-"), "miniSkipped": ("-", "skipped"),
        "miniMissing": ("failed", "-")}
    assert rows["miniFails"][3] == "Test failed: wrong sum"
    assert rows["miniSleeps"][3] == "still running after 5 s"
    assert rows["miniNeedsGL"][3] == "needs GLUT::GLUT"
    assert rows["miniMissing"][3].startswith("no sample named miniMissing")
    assert (tmp_path / "work" / "build" / "miniDrv" / "mini_kernel64.fatbin").exists()
    assert "2 pass, 1 fail, 1 timeout of 7 samples." in out.read_text()


def test_separable_compilation_builds_with_rdc(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import cuda_samples
    finally:
        sys.path.pop(0)
    add_sample(tmp_path, "miniCdp", {"main.cu": RUNTIME_SAMPLE},
               extra="set_target_properties(miniCdp PROPERTIES CUDA_SEPARABLE_COMPILATION ON)\n")
    add_sample(tmp_path, "miniWhole", {"main.cu": RUNTIME_SAMPLE})
    samples = tmp_path / "Samples" / "0_Introduction"
    assert cuda_samples.read_cmake("miniCdp", samples / "miniCdp").flags == ["-rdc=true"]
    assert cuda_samples.read_cmake("miniWhole", samples / "miniWhole").flags == []
