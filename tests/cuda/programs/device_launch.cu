// Kernels that launch kernels (CUDA dynamic parallelism; build with -rdc=true):
//   - fill: every thread of the parent launches a child that fills its chunk;
//   - nested: a kernel that launches itself until depth 4, each level adding 1 to a
//     counter and passing a struct by value;
//   - tail: a child in the NULL stream writes, a tail launch (cudaStreamTailLaunch)
//     checks that it runs after it;
//   - cudaGetLastError in the parent after its launches;
//   - streams: a quicksort whose every partition launches its two halves into two
//     device-side streams it creates; an event recorded on one stream and waited for
//     by another; cudaGetDevice/cudaGetDeviceCount in device code;
//   - with the argument "fault": a child writes through a bad pointer; the host sees
//     the launch fail at its next synchronization.
// Prints key=value lines the test checks.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

struct Step {
  int depth;
  int limit;
  int weight[6];   // 32 bytes of parameters by value
};

__global__ void fill_chunk(float* out, int n, float value) {
  int i = threadIdx.x;
  if (i < n) out[i] = value;
}

__global__ void fill(float* out, int n, int chunk) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n / chunk) fill_chunk<<<1, chunk>>>(out + t * chunk, chunk, 1.0f + t);
}

__global__ void nested(Step step, int* visits, int* weights) {
  atomicAdd(&visits[step.depth], 1);
  if (threadIdx.x == 0) atomicAdd(weights, step.weight[step.depth % 6]);
  if (threadIdx.x == 0 && step.depth + 1 < step.limit) {
    Step next = step;
    next.depth += 1;
    nested<<<2, 4>>>(next, visits, weights);
  }
}

__global__ void write_marker(int* marker) { *marker = 42; }

__global__ void check_marker(const int* marker, int* seen) { *seen = *marker; }

__global__ void bad_write(int* where) { *where = 1; }

__global__ void faulty_parent() { bad_write<<<1, 1>>>(reinterpret_cast<int*>(0x10)); }

__global__ void tail(int* marker, int* seen, int* last_error) {
  write_marker<<<1, 1>>>(marker);
  check_marker<<<1, 1, 0, cudaStreamTailLaunch>>>(marker, seen);
  *last_error = static_cast<int>(cudaGetLastError());
}

__device__ void swap_ints(int* a, int* b) {
  int t = *a;
  *a = *b;
  *b = t;
}

// One thread sorts data[left..right]: short ranges (or deep ones) by insertion, the rest
// partitioned around the last element with each half a child in a stream of its own.
__global__ void quicksort(int* data, int left, int right, int depth) {
  if (right - left < 8 || depth >= 12) {
    for (int i = left + 1; i <= right; ++i)
      for (int j = i; j > left && data[j - 1] > data[j]; --j) swap_ints(&data[j - 1], &data[j]);
    return;
  }
  int pivot = data[right], store = left;
  for (int j = left; j < right; ++j)
    if (data[j] < pivot) swap_ints(&data[store++], &data[j]);
  swap_ints(&data[store], &data[right]);
  cudaStream_t low, high;
  cudaStreamCreateWithFlags(&low, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&high, cudaStreamNonBlocking);
  quicksort<<<1, 1, 0, low>>>(data, left, store - 1, depth + 1);
  quicksort<<<1, 1, 0, high>>>(data, store + 1, right, depth + 1);
  cudaStreamDestroy(low);
  cudaStreamDestroy(high);
}

__global__ void event_between_streams(int* marker, int* seen, int* errors, int* device, int* count) {
  cudaStream_t first, second;
  cudaEvent_t written;
  int bad = 0;
  bad += cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking) != cudaSuccess;
  bad += cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking) != cudaSuccess;
  bad += first == second;
  bad += cudaEventCreateWithFlags(&written, cudaEventDisableTiming) != cudaSuccess;
  write_marker<<<1, 1, 0, first>>>(marker);
  bad += cudaEventRecord(written, first) != cudaSuccess;
  bad += cudaStreamWaitEvent(second, written, 0) != cudaSuccess;
  check_marker<<<1, 1, 0, second>>>(marker, seen);
  bad += cudaEventDestroy(written) != cudaSuccess;
  bad += cudaStreamDestroy(first) != cudaSuccess;
  bad += cudaStreamDestroy(second) != cudaSuccess;
  bad += cudaGetDevice(device) != cudaSuccess;
  bad += cudaGetDeviceCount(count) != cudaSuccess;
  *errors = bad + static_cast<int>(cudaGetLastError());
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "fault") == 0) {
    faulty_parent<<<1, 1>>>();
    printf("fault_error=%d\n", static_cast<int>(cudaDeviceSynchronize()));
    return 0;
  }
  const int n = 169, chunk = 13;
  float* out;
  CHECK(cudaMalloc(&out, n * sizeof(float)));
  CHECK(cudaMemset(out, 0, n * sizeof(float)));
  fill<<<1, n / chunk>>>(out, n, chunk);
  CHECK(cudaGetLastError());
  float host[n];
  CHECK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
  int fill_wrong = 0;
  for (int i = 0; i < n; ++i) fill_wrong += host[i] != 1.0f + i / chunk;
  printf("fill_wrong=%d\n", fill_wrong);

  int *visits, *weights;
  CHECK(cudaMalloc(&visits, 8 * sizeof(int)));
  CHECK(cudaMalloc(&weights, sizeof(int)));
  CHECK(cudaMemset(visits, 0, 8 * sizeof(int)));
  CHECK(cudaMemset(weights, 0, sizeof(int)));
  Step step{0, 4, {1, 10, 100, 1000, 10000, 100000}};
  nested<<<1, 4>>>(step, visits, weights);
  CHECK(cudaDeviceSynchronize());
  int v[8], w;
  CHECK(cudaMemcpy(v, visits, sizeof(v), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&w, weights, sizeof(w), cudaMemcpyDeviceToHost));
  // Level 0: one block of 4 threads; each block's thread 0 launches 2 blocks of the next level.
  printf("visits=%d,%d,%d,%d,%d weights=%d\n", v[0], v[1], v[2], v[3], v[4], w);

  int *marker, *seen, *last_error;
  CHECK(cudaMalloc(&marker, sizeof(int)));
  CHECK(cudaMalloc(&seen, sizeof(int)));
  CHECK(cudaMalloc(&last_error, sizeof(int)));
  CHECK(cudaMemset(marker, 0, sizeof(int)));
  CHECK(cudaMemset(seen, 0, sizeof(int)));
  tail<<<1, 1>>>(marker, seen, last_error);
  int s, e;
  CHECK(cudaMemcpy(&s, seen, sizeof(s), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&e, last_error, sizeof(e), cudaMemcpyDeviceToHost));
  printf("tail_seen=%d last_error=%d\n", s, e);

  const int items = 300;
  int values[items], *data;
  long long sum_before = 0, sum_after = 0;
  for (int i = 0; i < items; ++i) sum_before += values[i] = (i * 7919 + 13) % 1009 - 500;
  CHECK(cudaMalloc(&data, sizeof(values)));
  CHECK(cudaMemcpy(data, values, sizeof(values), cudaMemcpyHostToDevice));
  quicksort<<<1, 1>>>(data, 0, items - 1, 0);
  CHECK(cudaMemcpy(values, data, sizeof(values), cudaMemcpyDeviceToHost));
  int unsorted = 0;
  for (int i = 0; i < items; ++i) {
    sum_after += values[i];
    unsorted += i > 0 && values[i - 1] > values[i];
  }
  printf("unsorted=%d same_sum=%d\n", unsorted, static_cast<int>(sum_before == sum_after));

  int *errors, *device, *count;
  CHECK(cudaMalloc(&errors, sizeof(int)));
  CHECK(cudaMalloc(&device, sizeof(int)));
  CHECK(cudaMalloc(&count, sizeof(int)));
  CHECK(cudaMemset(marker, 0, sizeof(int)));
  CHECK(cudaMemset(seen, 0, sizeof(int)));
  event_between_streams<<<1, 1>>>(marker, seen, errors, device, count);
  int got[4];
  CHECK(cudaMemcpy(&got[0], seen, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&got[1], errors, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&got[2], device, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&got[3], count, sizeof(int), cudaMemcpyDeviceToHost));
  printf("event_seen=%d stream_errors=%d device=%d count=%d\n", got[0], got[1], got[2], got[3]);
  printf("done\n");
  return 0;
}
