// A best-effort job whose kernel runs until the job says so: it spins on a flag in
// mapped pinned memory, which the host sets when a line arrives on stdin. Holds the
// device (the scheduler runs one best-effort kernel at a time) for exactly as long
// as a test needs. Prints "launched" once the kernel is queued, "finished=<error>"
// after it ended, and "spins=<n>" (how long it waited).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void wait_for_flag(const volatile int* flag, unsigned long long* spins) {
  unsigned long long n = 0;
  while (*flag == 0) ++n;
  *spins = n;
}

int main() {
  int* flag;
  unsigned long long* spins;
  if (cudaHostAlloc(&flag, sizeof *flag, cudaHostAllocMapped) != cudaSuccess ||
      cudaMallocHost(&spins, sizeof *spins) != cudaSuccess)
    return 1;
  *flag = 0;
  wait_for_flag<<<1, 1>>>(flag, spins);
  printf("launched\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == nullptr) return 1;
  *(volatile int*)flag = 1;
  cudaError_t e = cudaDeviceSynchronize();
  printf("finished=%d spins=%llu\n", (int)e, *spins);
  return 0;
}
