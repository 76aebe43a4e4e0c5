// PTX linked at run time with nvJitLink for the device's own architecture
// (-arch=sm_XX), as cuda.core's Linker does (and so numba-cuda), and loaded as the
// cubin nvJitLinkGetLinkedCubin gives:
//   nvjitlink_cubin linked|dlopen one [CUBIN]   one PTX input (NVRTC's, for compute_XX)
//   nvjitlink_cubin linked|dlopen two           two relocatable PTX inputs (-rdc), one
//                                               calling a function the other defines;
//                                               the second added as a file (AddFile)
//   nvjitlink_cubin linked|dlopen lto           two LTO-IR inputs (NVRTC's -dlto),
//                                               linked with -lto
// A last argument --link-first links for sm_90 before the program's first CUDA call
// (nvJitLink needs no driver), else for the device's own architecture after it.
// linked: nvJitLink's functions called as linked (built with -DNVJITLINK_LINKED and
// -lnvJitLink: the header's inline functions call its versioned names); dlopen (built
// without): libnvJitLink opened RTLD_GLOBAL and its plain names looked up with
// RTLD_DEFAULT, as cuda-bindings does.
// Prints cubin=<bytes>, link_us=<microseconds from nvJitLinkCreate to the cubin in hand,
// what JIT capture adds to a link: bench/bench_jit_capture.py>, load=<CUresult of
// cuModuleLoadData>, then with a module
// checked=<n> bad=<n>. Exits 0 unless an NVRTC or nvJitLink call, or a call after the
// load, fails.
#include <cuda.h>
#include <dlfcn.h>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <chrono>

#include <string>
#include <vector>

#include "driver_check.h"
#include "relocatable_pair.h"

namespace {

const char kWhole[] = R"(
extern "C" __global__ void scale_add(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";
// The nvJitLink functions this program uses, linked or looked up.
struct NvJitLink {
  decltype(&nvJitLinkCreate) create;
  decltype(&nvJitLinkAddData) add_data;
  decltype(&nvJitLinkAddFile) add_file;
  decltype(&nvJitLinkComplete) complete;
  decltype(&nvJitLinkGetLinkedCubinSize) cubin_size;
  decltype(&nvJitLinkGetLinkedCubin) cubin;
  decltype(&nvJitLinkGetErrorLogSize) error_log_size;
  decltype(&nvJitLinkGetErrorLog) error_log;
  decltype(&nvJitLinkDestroy) destroy;
};

NvJitLink linked() {
#ifdef NVJITLINK_LINKED
  return {nvJitLinkCreate, nvJitLinkAddData, nvJitLinkAddFile, nvJitLinkComplete, nvJitLinkGetLinkedCubinSize,
          nvJitLinkGetLinkedCubin, nvJitLinkGetErrorLogSize, nvJitLinkGetErrorLog, nvJitLinkDestroy};
#else
  printf("error built without -DNVJITLINK_LINKED: dlopen only\n");
  exit(2);
#endif
}

template <typename F>
void look_up(const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  if (*out == nullptr) {
    printf("error %s not found after dlopen\n", name);
    exit(1);
  }
}

NvJitLink opened() {
  char soname[32];
  snprintf(soname, sizeof soname, "libnvJitLink.so.%d", CUDA_VERSION / 1000);
  if (dlopen(soname, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    printf("error dlopen(%s): %s\n", soname, dlerror());
    exit(1);
  }
  NvJitLink j{};
  look_up("nvJitLinkCreate", &j.create);
  look_up("nvJitLinkAddData", &j.add_data);
  look_up("nvJitLinkAddFile", &j.add_file);
  look_up("nvJitLinkComplete", &j.complete);
  look_up("nvJitLinkGetLinkedCubinSize", &j.cubin_size);
  look_up("nvJitLinkGetLinkedCubin", &j.cubin);
  look_up("nvJitLinkGetErrorLogSize", &j.error_log_size);
  look_up("nvJitLinkGetErrorLog", &j.error_log);
  look_up("nvJitLinkDestroy", &j.destroy);
  return j;
}

#define CALL(call)                                                         \
  do {                                                                     \
    int r_ = (int)(call);                                                  \
    if (r_ != 0) {                                                         \
      printf("error %s -> %d at line %d\n", #call, r_, __LINE__);          \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

// NVRTC's output for `source`: PTX for compute_XX, or LTO-IR with -dlto.
std::vector<char> compile(const char* source, const char* name, const char* arch, bool relocatable, bool lto) {
  nvrtcProgram prog;
  CALL(nvrtcCreateProgram(&prog, source, name, 0, nullptr, nullptr));
  std::vector<const char*> options = {arch};
  if (relocatable) options.push_back("-rdc=true");
  if (lto) options.push_back("-dlto");
  if (nvrtcCompileProgram(prog, static_cast<int>(options.size()), options.data()) != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(prog, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(prog, &log[0]);
    printf("error compile %s: %s\n", name, log.c_str());
    exit(1);
  }
  size_t size = 0;
  std::vector<char> out;
  if (lto) {
    CALL(nvrtcGetLTOIRSize(prog, &size));
    out.resize(size);
    CALL(nvrtcGetLTOIR(prog, out.data()));
  } else {
    CALL(nvrtcGetPTXSize(prog, &size));
    out.resize(size);
    CALL(nvrtcGetPTX(prog, out.data()));
  }
  CALL(nvrtcDestroyProgram(&prog));
  return out;
}

// The linked cubin of `inputs` (the last one added as a file when `last_as_file`).
std::vector<char> link(const NvJitLink& j, const char* sm, bool lto, nvJitLinkInputType type,
                       const std::vector<std::vector<char>>& inputs, bool last_as_file) {
  const auto started = std::chrono::steady_clock::now();
  nvJitLinkHandle handle;
  std::vector<const char*> options = {sm};
  if (lto) options.push_back("-lto");
  CALL(j.create(&handle, static_cast<uint32_t>(options.size()), options.data()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "input" + std::to_string(i);
    if (last_as_file && i + 1 == inputs.size()) {
      char path[] = "/tmp/tally-nvjitlink-XXXXXX";
      const int fd = mkstemp(path);
      FILE* f = fdopen(fd, "wb");
      fwrite(inputs[i].data(), 1, strnlen(inputs[i].data(), inputs[i].size()), f);
      fclose(f);
      CALL(j.add_file(handle, NVJITLINK_INPUT_PTX, path));
      unlink(path);  // gone before the link completes: nvJitLink (and tally) read it at AddFile
    } else {
      CALL(j.add_data(handle, type, inputs[i].data(), inputs[i].size(), name.c_str()));
    }
  }
  if (j.complete(handle) != NVJITLINK_SUCCESS) {
    size_t size = 0;
    j.error_log_size(handle, &size);
    std::string log(size, '\0');
    j.error_log(handle, &log[0]);
    printf("error link: %s\n", log.c_str());
    exit(1);
  }
  size_t size = 0;
  CALL(j.cubin_size(handle, &size));
  std::vector<char> cubin(size);
  CALL(j.cubin(handle, cubin.data()));
  const auto took = std::chrono::steady_clock::now() - started;
  printf("link_us=%lld\n", (long long)std::chrono::duration_cast<std::chrono::microseconds>(took).count());
  CALL(j.destroy(&handle));
  return cubin;
}

void check_scale_add(CUmodule mod) {
  CUfunction f;
  CHECK(cuModuleGetFunction(&f, mod, "scale_add"));
  int n = 3000;
  std::vector<float> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) x[i] = 0.25f * i, y[i] = 1.0f - i;
  CUdeviceptr dx, dy;
  CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  float a = 2.5f;
  void* params[] = {&a, &dx, &dy, &n};
  CHECK(cuLaunchKernel(f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  CHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += out[i] != a * x[i] + y[i];
  printf("checked=%d bad=%d\n", n, bad);
}

}  // namespace

int main(int argc, char** argv) {
  const bool link_first = argc >= 4 && strcmp(argv[argc - 1], "--link-first") == 0;
  if (link_first) --argc;
  if ((argc != 3 && argc != 4) || (strcmp(argv[1], "linked") != 0 && strcmp(argv[1], "dlopen") != 0) ||
      (strcmp(argv[2], "one") != 0 && strcmp(argv[2], "two") != 0 && strcmp(argv[2], "lto") != 0)) {
    printf("usage: nvjitlink_cubin linked|dlopen one|two|lto [CUBIN] [--link-first]\n");
    return 2;
  }
  const NvJitLink j = strcmp(argv[1], "linked") == 0 ? linked() : opened();
  const std::string how = argv[2];
  int major = 9, minor = 0;
  if (!link_first) {
    setup();
    CUdevice dev;
    CHECK(cuCtxGetDevice(&dev));
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  }
  char compute[32], sm[32];
  snprintf(compute, sizeof compute, "-arch=compute_%d%d", major, minor);
  snprintf(sm, sizeof sm, "-arch=sm_%d%d", major, minor);

  std::vector<char> cubin;
  if (how == "one") {
    cubin = link(j, sm, false, NVJITLINK_INPUT_PTX, {compile(kWhole, "whole.cu", compute, false, false)}, false);
  } else {
    const bool lto = how == "lto";
    std::vector<std::vector<char>> inputs = {compile(kCaller, "caller.cu", compute, true, lto),
                                             compile(kCallee, "callee.cu", compute, true, lto)};
    cubin = link(j, sm, lto, lto ? NVJITLINK_INPUT_LTOIR : NVJITLINK_INPUT_PTX, inputs, !lto);
  }
  if (link_first) setup();
  printf("cubin=%zu\n", cubin.size());
  if (argc == 4) {
    FILE* out = fopen(argv[3], "wb");
    if (out == nullptr || fwrite(cubin.data(), 1, cubin.size(), out) != cubin.size() || fclose(out) != 0) {
      printf("error cannot write %s\n", argv[3]);
      return 1;
    }
  }
  CUmodule mod;
  const CUresult rc = cuModuleLoadData(&mod, cubin.data());
  printf("load=%d\n", (int)rc);
  fflush(stdout);
  if (rc != CUDA_SUCCESS) return 0;
  if (how == "one")
    check_scale_add(mod);
  else
    check_shift_all(mod);
  CHECK(cuModuleUnload(mod));
  return 0;
}
