// Programmatic dependent launch as CUDA C++ programs write it: a primary kernel
// that lets its dependents start early (cudaTriggerProgrammaticLaunchCompletion,
// PTX griddepcontrol.launch_dependents) and a secondary launched with
// cudaLaunchKernelEx and the programmatic stream serialization attribute, which
// waits for the primary's memory (cudaGridDependencySynchronize, PTX
// griddepcontrol.wait) before reading it; then the same pair with a programmatic
// event that another stream waits on. Each secondary must see all of its
// primary's writes.
#include <cstdio>
#include <vector>

#include "runtime_check.h"

constexpr int kThreads = 128;
constexpr int kBlocks = 8;
constexpr int kN = kThreads * kBlocks;

__global__ void primary(int* data, int round) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  data[i] = i * round;
  cudaTriggerProgrammaticLaunchCompletion();
}

__global__ void secondary(const int* data, int* out) {
  cudaGridDependencySynchronize();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = data[i] + 1;
}

int wrong(const int* d_out, int round) {
  std::vector<int> out(kN);
  CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < kN; ++i) bad += out[i] != i * round + 1;
  return bad;
}

int main() {
  int *d_data, *d_out;
  CHECK(cudaMalloc(&d_data, kN * sizeof(int)));
  CHECK(cudaMalloc(&d_out, kN * sizeof(int)));
  cudaStream_t stream, other;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kBlocks);
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  cudaLaunchAttribute attrs[1];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attrs;
  config.numAttrs = 1;
  int serialized_wrong = 0;
  for (int round = 1; round <= 5; ++round) {
    primary<<<kBlocks, kThreads, 0, stream>>>(d_data, round);
    CHECK(cudaGetLastError());
    CHECK(cudaLaunchKernelEx(&config, secondary, (const int*)d_data, d_out));
    CHECK(cudaStreamSynchronize(stream));
    serialized_wrong += wrong(d_out, round);
  }
  printf("serialized_wrong=%d\n", serialized_wrong);

  // The primary triggers a programmatic event; another stream's secondary waits on it.
  cudaEvent_t triggered;
  CHECK(cudaEventCreateWithFlags(&triggered, cudaEventDisableTiming));
  cudaLaunchConfig_t primary_config = config;
  cudaLaunchAttribute event_attr[1];
  event_attr[0].id = cudaLaunchAttributeProgrammaticEvent;
  event_attr[0].val.programmaticEvent.event = triggered;
  event_attr[0].val.programmaticEvent.flags = 0;
  event_attr[0].val.programmaticEvent.triggerAtBlockStart = 0;
  primary_config.attrs = event_attr;
  CHECK(cudaLaunchKernelEx(&primary_config, primary, d_data, 7));
  CHECK(cudaStreamWaitEvent(other, triggered, 0));
  secondary<<<kBlocks, kThreads, 0, other>>>(d_data, d_out);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(other));
  printf("event_wrong=%d\n", wrong(d_out, 7));

  CHECK(cudaEventDestroy(triggered));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaStreamDestroy(other));
  CHECK(cudaFree(d_data));
  CHECK(cudaFree(d_out));
  return 0;
}
