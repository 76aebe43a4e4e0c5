// A best-effort job whose device memory keeps growing, as a leaking training job's
// does: every argv[2] milliseconds it allocates argv[1] MiB more and runs a kernel
// over the newest chunk, printing "held=<MiB>", until a call fails (it prints
// "failed_at=<MiB> error=<code>" and exits 1) or it holds argv[3] MiB (exits 0).
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>

__global__ void touch(unsigned* chunk, size_t words) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < words) chunk[i] = (unsigned)i;
}

int main(int argc, char** argv) {
  size_t step = argc > 1 ? strtoul(argv[1], nullptr, 0) : 16;
  unsigned pause_ms = argc > 2 ? (unsigned)strtoul(argv[2], nullptr, 0) : 100;
  size_t most = argc > 3 ? strtoul(argv[3], nullptr, 0) : 1024;
  size_t held = 0;
  while (held < most) {
    unsigned* chunk = nullptr;
    cudaError_t e = cudaMalloc(&chunk, step << 20);
    if (e == cudaSuccess) {
      touch<<<64, 128>>>(chunk, 64 * 128);     // a few pages of it: the work a job does with its memory
      e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess) {
      printf("failed_at=%zu error=%d\n", held, (int)e);
      return 1;
    }
    held += step;
    printf("held=%zu\n", held);
    fflush(stdout);
    usleep(pause_ms * 1000);
  }
  return 0;
}
