// CUDA C++ compiled at run time with NVRTC for the device's own architecture
// (-arch=sm_XX), as cuda-samples' *_nvrtc, PyTorch's jiterator and cuda-python's
// examples do, and loaded as the cubin nvrtcGetCUBIN gives:
//   nvrtc_cubin linked [CUBIN]   NVRTC's functions called as linked (-lnvrtc)
//   nvrtc_cubin dlopen [CUBIN]   NVRTC dlopened by soname and its functions looked up in
//                                that handle (as cuda-bindings does)
//   nvrtc_cubin rdc              two programs compiled with -dc (relocatable cubins), one
//                                calling a function the other defines, linked with cuLink:
//                                one passed as CU_JIT_INPUT_CUBIN, the other as
//                                CU_JIT_INPUT_PTX (CuPy passes its cubins so; the driver
//                                takes an input by its content); prints linked=<CUresult>
// With CUBIN, the cubin is also written to that file.
// Kernels: axpy<float> and axpy<int> (a template: found by their lowered names) and
// square (extern "C"), each over 3000 elements in 12 blocks, checked on the host.
// Prints cubin=<bytes>, load=<CUresult of cuModuleLoadData>, then with a module
// checked=<n> bad=<n>. Exits 0 unless an NVRTC call or a call after the load fails.
#include <cuda.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "driver_check.h"
#include "relocatable_pair.h"

namespace {

const char kSource[] = R"(
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void square(int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = v[i] * v[i];
}
)";

// The NVRTC functions this program uses, linked or looked up in a dlopen handle.
struct Nvrtc {
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcAddNameExpression) add_name;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetProgramLogSize) log_size;
  decltype(&nvrtcGetProgramLog) log;
  decltype(&nvrtcGetLoweredName) lowered;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcDestroyProgram) destroy;
};

Nvrtc linked() {
  return {nvrtcCreateProgram, nvrtcAddNameExpression, nvrtcCompileProgram, nvrtcGetProgramLogSize,
          nvrtcGetProgramLog, nvrtcGetLoweredName, nvrtcGetCUBINSize, nvrtcGetCUBIN, nvrtcDestroyProgram};
}

template <typename F>
void look_up(void* handle, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr) {
    printf("error %s not in the dlopened NVRTC\n", name);
    exit(1);
  }
}

Nvrtc opened() {
  char soname[32];
  snprintf(soname, sizeof soname, "libnvrtc.so.%d", CUDA_VERSION / 1000);
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    printf("error dlopen(%s): %s\n", soname, dlerror());
    exit(1);
  }
  Nvrtc n{};
  look_up(h, "nvrtcCreateProgram", &n.create);
  look_up(h, "nvrtcAddNameExpression", &n.add_name);
  look_up(h, "nvrtcCompileProgram", &n.compile);
  look_up(h, "nvrtcGetProgramLogSize", &n.log_size);
  look_up(h, "nvrtcGetProgramLog", &n.log);
  look_up(h, "nvrtcGetLoweredName", &n.lowered);
  look_up(h, "nvrtcGetCUBINSize", &n.cubin_size);
  look_up(h, "nvrtcGetCUBIN", &n.cubin);
  look_up(h, "nvrtcDestroyProgram", &n.destroy);
  return n;
}

#define NVRTC(call)                                                        \
  do {                                                                     \
    nvrtcResult r_ = (call);                                               \
    if (r_ != NVRTC_SUCCESS) {                                             \
      printf("error %s -> %d at line %d\n", #call, (int)r_, __LINE__);     \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

int bad_results(CUfunction axpy_f, CUfunction axpy_i, CUfunction square, int n) {
  float* xf = new float[n]; float* yf = new float[n];
  int* xi = new int[n]; int* yi = new int[n]; int* v = new int[n];
  for (int i = 0; i < n; ++i) {
    xf[i] = 0.25f * i, yf[i] = 1.0f - i;
    xi[i] = i % 97, yi[i] = 3 * i;
    v[i] = i % 1000 - 500;
  }
  CUdeviceptr dxf, dyf, dxi, dyi, dv;
  const size_t bytes = n * sizeof(float);
  for (CUdeviceptr* p : {&dxf, &dyf, &dxi, &dyi, &dv}) CHECK(cuMemAlloc(p, bytes));
  const void* inputs[] = {xf, yf, xi, yi, v};
  const CUdeviceptr on_device[] = {dxf, dyf, dxi, dyi, dv};
  for (int k = 0; k < 5; ++k) CHECK(cuMemcpyHtoD(on_device[k], inputs[k], bytes));
  float af = 2.5f;
  int ai = -3;
  void* pf[] = {&af, &dxf, &dyf, &n};
  void* pi[] = {&ai, &dxi, &dyi, &n};
  void* ps[] = {&dv, &n};
  const unsigned blocks = (n + 255) / 256;
  CHECK(cuLaunchKernel(axpy_f, blocks, 1, 1, 256, 1, 1, 0, nullptr, pf, nullptr));
  CHECK(cuLaunchKernel(axpy_i, blocks, 1, 1, 256, 1, 1, 0, nullptr, pi, nullptr));
  CHECK(cuLaunchKernel(square, blocks, 1, 1, 256, 1, 1, 0, nullptr, ps, nullptr));
  float* of = new float[n]; int* oi = new int[n]; int* ov = new int[n];
  CHECK(cuMemcpyDtoH(of, dyf, bytes));
  CHECK(cuMemcpyDtoH(oi, dyi, bytes));
  CHECK(cuMemcpyDtoH(ov, dv, bytes));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    bad += of[i] != af * xf[i] + yf[i];
    bad += oi[i] != ai * xi[i] + yi[i];
    bad += ov[i] != v[i] * v[i];
  }
  return bad;
}

// A relocatable cubin of `source` for `arch` (-dc).
std::vector<char> relocatable(const Nvrtc& nv, const char* source, const char* name, const char* arch) {
  nvrtcProgram prog;
  NVRTC(nv.create(&prog, source, name, 0, nullptr, nullptr));
  const char* options[] = {arch, "-dc"};
  NVRTC(nv.compile(prog, 2, options));
  size_t size = 0;
  NVRTC(nv.cubin_size(prog, &size));
  std::vector<char> cubin(size);
  NVRTC(nv.cubin(prog, cubin.data()));
  NVRTC(nv.destroy(&prog));
  return cubin;
}

int link_and_run(const Nvrtc& nv, const char* arch) {
  std::vector<char> caller = relocatable(nv, kCaller, "caller.cu", arch);
  std::vector<char> callee = relocatable(nv, kCallee, "callee.cu", arch);
  CUlinkState link;
  CHECK(cuLinkCreate(0, nullptr, nullptr, &link));
  CUresult rc = cuLinkAddData(link, CU_JIT_INPUT_CUBIN, caller.data(), caller.size(), "caller", 0, nullptr, nullptr);
  if (rc == CUDA_SUCCESS)
    rc = cuLinkAddData(link, CU_JIT_INPUT_PTX, callee.data(), callee.size(), "callee", 0, nullptr, nullptr);
  void* image = nullptr;
  size_t image_size = 0;
  if (rc == CUDA_SUCCESS) rc = cuLinkComplete(link, &image, &image_size);
  printf("linked=%d\n", (int)rc);
  if (rc != CUDA_SUCCESS) return 0;
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, image));
  CHECK(cuLinkDestroy(link));
  check_shift_all(mod);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool rdc = argc == 2 && strcmp(argv[1], "rdc") == 0;
  if (!rdc && ((argc != 2 && argc != 3) || (strcmp(argv[1], "linked") != 0 && strcmp(argv[1], "dlopen") != 0))) {
    printf("usage: nvrtc_cubin linked|dlopen [CUBIN] | rdc\n");
    return 2;
  }
  const Nvrtc nv = strcmp(argv[1], "dlopen") != 0 ? linked() : opened();
  setup();
  CUdevice dev;
  int major = 0, minor = 0;
  CHECK(cuCtxGetDevice(&dev));
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  char arch[32];
  snprintf(arch, sizeof arch, "-arch=sm_%d%d", major, minor);
  if (rdc) return link_and_run(nv, arch);

  nvrtcProgram prog;
  NVRTC(nv.create(&prog, kSource, "kernels.cu", 0, nullptr, nullptr));
  NVRTC(nv.add_name(prog, "axpy<float>"));
  NVRTC(nv.add_name(prog, "axpy<int>"));
  const char* options[] = {arch, "-std=c++17"};
  const nvrtcResult compiled = nv.compile(prog, 2, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    nv.log_size(prog, &size);
    char* log = new char[size + 1]();
    nv.log(prog, log);
    printf("error compile %s -> %d: %s\n", arch, (int)compiled, log);
    return 1;
  }
  const char *axpy_f_name, *axpy_i_name;
  NVRTC(nv.lowered(prog, "axpy<float>", &axpy_f_name));
  NVRTC(nv.lowered(prog, "axpy<int>", &axpy_i_name));
  size_t cubin_size = 0;
  NVRTC(nv.cubin_size(prog, &cubin_size));
  char* cubin = new char[cubin_size];
  NVRTC(nv.cubin(prog, cubin));
  printf("cubin=%zu\n", cubin_size);
  if (argc == 3) {
    FILE* out = fopen(argv[2], "wb");
    if (out == nullptr || fwrite(cubin, 1, cubin_size, out) != cubin_size || fclose(out) != 0) {
      printf("error cannot write %s\n", argv[2]);
      return 1;
    }
  }

  CUmodule mod;
  const CUresult rc = cuModuleLoadData(&mod, cubin);
  printf("load=%d\n", (int)rc);
  fflush(stdout);
  if (rc != CUDA_SUCCESS) return 0;
  CUfunction axpy_f, axpy_i, square;
  CHECK(cuModuleGetFunction(&axpy_f, mod, axpy_f_name));
  CHECK(cuModuleGetFunction(&axpy_i, mod, axpy_i_name));
  CHECK(cuModuleGetFunction(&square, mod, "square"));
  NVRTC(nv.destroy(&prog));  // the lowered names were the program's: looked up before
  const int n = 3000;
  printf("checked=%d bad=%d\n", 3 * n, bad_results(axpy_f, axpy_i, square, n));
  CHECK(cuModuleUnload(mod));
  return 0;
}
