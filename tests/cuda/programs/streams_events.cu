// Streams and events with asynchronous copies from pinned memory and host functions:
//   - two non-blocking streams, each: async HtoD from pinned memory, kernel, async
//     DtoH into pinned memory, then a host function that checks the result in
//     stream order (it must see the finished copy) and records that it ran;
//   - a stream made to wait on an event recorded on the other;
//   - event query before/after, elapsed time, a created-with-priority stream;
//   - cudaHostRegister'ed (malloc'ed) memory used the same way;
//   - the legacy default stream ordered after a blocking stream;
//   - an event destroyed right after another stream waits on it (CuPy's DLPack export
//     does this): the wait still holds.
// Prints key=value lines the test checks.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void scale_add(const int* in, int* out, int factor, int offset, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor + offset;
}

__global__ void add_from(int* data, const int* other, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += other[i];
}

struct Check {
  const int* host;   // pinned output the host function inspects
  int n;
  int factor, offset;
  std::atomic<int>* ran;
  int* good;          // elements right when the callback ran
};

// Runs in stream order after the DtoH copy: it must already see the results.
void CUDART_CB verify(void* arg) {
  Check* c = static_cast<Check*>(arg);
  int good = 0;
  for (int i = 0; i < c->n; ++i) good += c->host[i] == i * c->factor + c->offset;
  *c->good = good;
  c->ran->fetch_add(1);
}

// cudaStreamAddCallback's form: runs after everything before it on the stream.
void CUDART_CB stream_callback(cudaStream_t, cudaError_t status, void* arg) {
  static_cast<std::atomic<int>*>(arg)->fetch_add(status == cudaSuccess ? 10 : 1000);
}

int main() {
  const int n = 4096;
  const size_t bytes = n * sizeof(int);
  int *in_pinned, *out_a, *out_b;
  CHECK(cudaMallocHost(&in_pinned, bytes));
  CHECK(cudaHostAlloc(&out_a, bytes, cudaHostAllocDefault));
  unsigned flags = 99;
  CHECK(cudaHostGetFlags(&flags, out_a));
  printf("host_flags=%u\n", flags);
  int* out_b_storage = static_cast<int*>(malloc(bytes + 4096));
  out_b = out_b_storage;
  CHECK(cudaHostRegister(out_b, bytes, cudaHostRegisterDefault));
  for (int i = 0; i < n; ++i) in_pinned[i] = i;
  memset(out_a, 0, bytes);
  memset(out_b, 0, bytes);

  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t sa, sb;
  CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithPriority(&sb, cudaStreamNonBlocking, greatest));
  int prio = 1;
  CHECK(cudaStreamGetPriority(sb, &prio));
  printf("priority=%d range=%d..%d\n", prio, least, greatest);

  int *d_in, *d_a, *d_b;
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_a, bytes));
  CHECK(cudaMalloc(&d_b, bytes));
  // What cudart makes of tally's pointer attributes: pinned host, device, and
  // ordinary host memory (cudaMemoryTypeHost 1, Device 2, Unregistered 0).
  cudaPointerAttributes pinned_attr, device_attr, plain_attr;
  int plain = 0;
  CHECK(cudaPointerGetAttributes(&pinned_attr, out_a));
  CHECK(cudaPointerGetAttributes(&device_attr, d_a));
  CHECK(cudaPointerGetAttributes(&plain_attr, &plain));
  printf("pointer_types=%d,%d,%d pinned_host_pointer_ok=%d\n", (int)pinned_attr.type, (int)device_attr.type,
         (int)plain_attr.type, pinned_attr.hostPointer == out_a ? 1 : 0);

  cudaEvent_t start, copied_in, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&copied_in));
  CHECK(cudaEventCreate(&stop));
  printf("query_unrecorded=%d\n", (int)cudaEventQuery(copied_in));

  std::atomic<int> ran{0};
  int good_a = -1, good_b = -1;
  Check ca{out_a, n, 3, 1, &ran, &good_a};
  Check cb{out_b, n, 5, 7, &ran, &good_b};

  const int threads = 256, blocks = (n + threads - 1) / threads;
  CHECK(cudaEventRecord(start, sa));
  CHECK(cudaMemcpyAsync(d_in, in_pinned, bytes, cudaMemcpyHostToDevice, sa));
  CHECK(cudaEventRecord(copied_in, sa));
  scale_add<<<blocks, threads, 0, sa>>>(d_in, d_a, 3, 1, n);
  CHECK(cudaMemcpyAsync(out_a, d_a, bytes, cudaMemcpyDeviceToHost, sa));
  CHECK(cudaLaunchHostFunc(sa, verify, &ca));
  CHECK(cudaEventRecord(stop, sa));

  // Stream b needs d_in: it waits for the copy on stream a.
  CHECK(cudaStreamWaitEvent(sb, copied_in, 0));
  scale_add<<<blocks, threads, 0, sb>>>(d_in, d_b, 5, 7, n);
  CHECK(cudaMemcpyAsync(out_b, d_b, bytes, cudaMemcpyDeviceToHost, sb));
  CHECK(cudaLaunchHostFunc(sb, verify, &cb));
  std::atomic<int> stream_callbacks{0};
  CHECK(cudaStreamAddCallback(sb, stream_callback, &stream_callbacks, 0));

  CHECK(cudaStreamSynchronize(sb));
  CHECK(cudaEventSynchronize(stop));
  printf("query_done=%d\n", (int)cudaEventQuery(stop));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  printf("elapsed_ok=%d\n", ms >= 0.0f ? 1 : 0);
  printf("callbacks=%d good_a=%d good_b=%d n=%d\n", ran.load(), good_a, good_b, n);
  printf("stream_callbacks=%d\n", stream_callbacks.load());
  printf("stream_query=%d\n", (int)cudaStreamQuery(sa));

  // Legacy default stream: a blocking stream's kernel, then a synchronous copy on
  // the legacy stream, which must wait for it.
  cudaStream_t blocking;
  CHECK(cudaStreamCreate(&blocking));
  add_from<<<blocks, threads, 0, blocking>>>(d_a, d_b, n);   // d_a = 3i+1 + 5i+7
  int* legacy_out = static_cast<int*>(malloc(bytes));
  CHECK(cudaMemcpy(legacy_out, d_a, bytes, cudaMemcpyDeviceToHost));
  int legacy_good = 0;
  for (int i = 0; i < n; ++i) legacy_good += legacy_out[i] == 8 * i + 8;
  printf("legacy_good=%d\n", legacy_good);

  // The event goes at once; the wait queued on it still orders the copy after the
  // kernels. Fresh streams each round, three launches each: the later ones go by the
  // server's data plane, so the record waits in the executor behind them while the
  // wait and the destroy arrive (lost before: 11 to 16 rounds in 20 read stale data).
  int* fill = nullptr;
  CHECK(cudaMalloc(&fill, bytes));
  int destroyed_wait_good = 0;
  const int rounds = 8;
  for (int round = 0; round < rounds; ++round) {
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    for (int k = 0; k < 3; ++k) scale_add<<<blocks, threads, 0, s1>>>(d_in, fill, k, round, n);
    cudaEvent_t handed_over;
    CHECK(cudaEventCreateWithFlags(&handed_over, cudaEventDisableTiming));
    CHECK(cudaEventRecord(handed_over, s1));
    CHECK(cudaStreamWaitEvent(s2, handed_over, 0));
    CHECK(cudaEventDestroy(handed_over));
    CHECK(cudaMemcpyAsync(out_b, fill, bytes, cudaMemcpyDeviceToHost, s2));
    CHECK(cudaStreamSynchronize(s2));
    int good = 0;
    for (int i = 0; i < n; ++i) good += out_b[i] == 2 * i + round;
    destroyed_wait_good += good == n;
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
  }
  printf("destroyed_wait_good=%d rounds=%d\n", destroyed_wait_good, rounds);
  CHECK(cudaFree(fill));

  CHECK(cudaStreamDestroy(sa));
  CHECK(cudaStreamDestroy(sb));
  CHECK(cudaStreamDestroy(blocking));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(copied_in));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaHostUnregister(out_b));
  CHECK(cudaFreeHost(in_pinned));
  CHECK(cudaFreeHost(out_a));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaDeviceSynchronize());
  free(out_b_storage);
  free(legacy_out);
  printf("done\n");
  return 0;
}
