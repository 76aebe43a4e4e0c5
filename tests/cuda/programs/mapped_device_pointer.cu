// Mapped pinned host memory used through its device pointer as any device memory
// is (numba's mapped arrays do this): cuMemHostAlloc(DEVICEMAP) and
// cuMemHostGetDevicePointer, then memset, copies in every direction, a kernel
// writing through it, and cuMemGetAddressRange on it. Prints key=value lines.
#include <cuda.h>
#include <cstdio>
#include <cstring>

#include "runtime_check.h"

#define CU(call)                                                          \
  do {                                                                    \
    CUresult r = (call);                                                  \
    if (r != CUDA_SUCCESS) {                                              \
      printf("error %s at line %d: %d\n", #call, __LINE__, (int)r);       \
      return 1;                                                           \
    }                                                                     \
  } while (0)

__global__ void write_index(unsigned char* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<unsigned char>(i % 251);
}

static int count_equal(const unsigned char* p, size_t n, unsigned char value) {
  int good = 0;
  for (size_t i = 0; i < n; ++i) good += p[i] == value;
  return good;
}

int main() {
  const size_t n = 10000;  // not a whole number of pages
  CHECK(cudaFree(0));     // the runtime's primary context is current for the driver calls
  void* host = nullptr;
  CU(cuMemHostAlloc(&host, n, CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr dev = 0;
  CU(cuMemHostGetDevicePointer(&dev, host, 0));
  auto* bytes = static_cast<unsigned char*>(host);

  // memset through the device pointer, seen by the host and by a copy back
  CU(cuMemsetD8(dev, 0x5a, n));
  printf("memset_host_sees=%d\n", count_equal(bytes, n, 0x5a));
  static unsigned char back[n];
  CU(cuMemcpyDtoH(back, dev, n));
  printf("dtoh_good=%d\n", count_equal(back, n, 0x5a));

  // an offset inside it, 16-bit and 32-bit memsets, asynchronous forms
  CU(cuMemsetD16(dev + 100, 0x0707, 50));
  CU(cuMemsetD32Async(dev + 1000, 0x09090909, 25, 0));
  CU(cuStreamSynchronize(0));
  printf("memset_offsets=%d,%d\n", count_equal(bytes + 100, 100, 7), count_equal(bytes + 1000, 100, 9));

  // host -> mapped and device -> mapped, mapped -> device
  static unsigned char ones[n];
  std::memset(ones, 1, n);
  CU(cuMemcpyHtoD(dev, ones, n));
  printf("htod_host_sees=%d\n", count_equal(bytes, n, 1));
  CUdeviceptr plain = 0;
  CU(cuMemAlloc(&plain, n));
  CU(cuMemsetD8(plain, 3, n));
  CU(cuMemcpyDtoD(dev, plain, n));
  printf("dtod_into_mapped=%d\n", count_equal(bytes, n, 3));
  std::memset(bytes, 4, n);
  CU(cuMemcpyDtoD(plain, dev, n));
  CU(cuMemcpyDtoH(back, plain, n));
  printf("dtod_from_mapped=%d\n", count_equal(back, n, 4));
  CU(cuMemcpy(plain, dev, n));  // unified addressing: the driver tells which is which
  printf("unified_copy_ok=1\n");

  // a kernel writing through the device pointer
  write_index<<<(n + 255) / 256, 256>>>(reinterpret_cast<unsigned char*>(dev), n);
  CHECK(cudaDeviceSynchronize());
  int kernel_good = 0;
  for (size_t i = 0; i < n; ++i) kernel_good += bytes[i] == i % 251;
  printf("kernel_good=%d\n", kernel_good);

  // its address range, from inside it
  CUdeviceptr base = 0;
  size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, dev + 1234));
  printf("range_base_ok=%d range_size=%zu\n", base == dev, size);

  // what stays refused: past its end
  printf("past_end=%d\n", (int)cuMemsetD8(dev + n + 8192, 0, 16));

  CU(cuMemFree(plain));
  CU(cuMemFreeHost(host));
  printf("done=1\n");
  return 0;
}
