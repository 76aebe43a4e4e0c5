// The best-effort job of `tally-bench chaos`: it cycles through phases the
// benchmark aims its kills at, announcing each one on stdout (flushed) before it
// starts, so a signal sent a moment after "phase=copy" lands mid-copy.
//
//   alloc   32 device and stream-ordered allocations, 16 managed and pinned host
//           ones; half the device ones freed at once, the rest held to the cycle's end
//   copy    pageable and pinned copies both ways, synchronous and on a stream (16 rounds)
//   kernel  a kernel whose threads loop --spin times, then a synchronization
//   graph   a captured graph (kernel, copy, kernel) instantiated and launched
//
//   chaos_victim [--elements N] [--spin S] [--cycles C]   (C = 0: until killed)
// Any failing CUDA call ends it with status 1 and the call on stderr.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "job_common.h"

__global__ void spin_kernel(float* data, int n, int spin) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = data[i];
  for (int k = 0; k < spin; ++k) x = x * 0.999f + 0.001f * float(k & 7);
  data[i] = x;
}

__global__ void scale_kernel(float* data, int n, float by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= by;
}

static void phase(const char* name, long cycle) {
  std::printf("phase=%s cycle=%ld\n", name, cycle);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  job::program_name = "chaos_victim";
  job::Flags flags(argc, argv, {"elements", "spin", "cycles"});
  const int n = int(flags.whole("elements", 1 << 16, 1));
  const int spin = int(flags.whole("spin", 128, 0));
  const long cycles = flags.whole("cycles", 0, 0);
  const size_t bytes = size_t(n) * sizeof(float);
  const int threads = 128, blocks = (n + threads - 1) / threads;

  cudaStream_t stream;
  JOB_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<float> host(n, 1.0f);
  for (long cycle = 0; cycles == 0 || cycle < cycles; ++cycle) {
    phase("alloc", cycle);
    std::vector<void*> device, managed, pinned;
    for (int k = 0; k < 32; ++k) {
      void* p = nullptr;
      JOB_CHECK(cudaMalloc(&p, bytes + size_t(k) * 4096));
      device.push_back(p);
      JOB_CHECK(cudaMallocAsync(&p, bytes / 2 + size_t(k) * 512, stream));
      JOB_CHECK(cudaFreeAsync(p, stream));
      if (k % 2 == 0) {
        JOB_CHECK(cudaMallocManaged(&p, bytes / 4));
        managed.push_back(p);
        JOB_CHECK(cudaMallocHost(&p, bytes / 4));
        pinned.push_back(p);
      }
    }
    for (int k = 0; k < 16; ++k) JOB_CHECK(cudaFree(device[k]));
    device.erase(device.begin(), device.begin() + 16);
    JOB_CHECK(cudaStreamSynchronize(stream));
    float* data = static_cast<float*>(device[0]);
    float* staging = static_cast<float*>(pinned[0]);

    phase("copy", cycle);
    for (int k = 0; k < 16; ++k) {
      JOB_CHECK(cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice));
      JOB_CHECK(cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost));
      JOB_CHECK(cudaMemcpyAsync(staging, data, bytes / 4, cudaMemcpyDeviceToHost, stream));
      JOB_CHECK(cudaMemcpyAsync(device[1], staging, bytes / 4, cudaMemcpyHostToDevice, stream));
    }
    JOB_CHECK(cudaStreamSynchronize(stream));

    phase("kernel", cycle);
    spin_kernel<<<blocks, threads, 0, stream>>>(data, n, spin);
    JOB_CHECK(cudaGetLastError());
    JOB_CHECK(cudaStreamSynchronize(stream));

    phase("graph", cycle);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    JOB_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    scale_kernel<<<blocks, threads, 0, stream>>>(data, n, 0.5f);
    JOB_CHECK(cudaMemcpyAsync(device[2], data, bytes, cudaMemcpyDeviceToDevice, stream));
    spin_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(device[2]), n, spin / 4);
    JOB_CHECK(cudaStreamEndCapture(stream, &graph));
    JOB_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int k = 0; k < 3; ++k) JOB_CHECK(cudaGraphLaunch(exec, stream));
    JOB_CHECK(cudaStreamSynchronize(stream));
    JOB_CHECK(cudaGraphExecDestroy(exec));
    JOB_CHECK(cudaGraphDestroy(graph));

    for (void* p : device) JOB_CHECK(cudaFree(p));
    for (void* p : managed) JOB_CHECK(cudaFree(p));
    for (void* p : pinned) JOB_CHECK(cudaFreeHost(p));
  }
  phase("done", cycles);
  JOB_CHECK(cudaStreamDestroy(stream));
  return 0;
}
