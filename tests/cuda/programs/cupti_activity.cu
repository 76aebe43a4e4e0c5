// A profiler's use of CUPTI, as the CUPTI samples and Kineto make it: buffer
// callbacks, activity kinds, an external correlation id around the work, a
// resource-callback subscriber, flush, and a walk over the records. Prints what it
// got, one line per fact, for tests/test_e2e_cupti.py:
//   refused kind=<k> result=<CUPTI result name>
//   kernel name=<n> grid=<x> block=<x> dyn_shared=<b> start_le_end=<0|1> corr=<id> ext=<id>
//   memcpy kind=<HTOD|DTOH|DTOD> bytes=<n> async=<0|1> corr=<id> ext=<id>
//   memset bytes=<n> value=<v> corr=<id> ext=<id>
//   driver cbid=<name> corr=<id> api_before_kernel_end=<0|1>
//   summary contexts_created=<n> dropped=<n> popped=<id> result=<sum>
// With the argument "no-buffer" its buffer callback gives no buffer: every record is
// dropped (and counted), and the work itself is unharmed. With "many <n>" it then
// launches n more kernels (synchronizing every 256) and prints `many kernels=<records>
// buffers_before_flush=<b>`: a profiler that does not flush still gets its full buffers back.
#include <cuda_runtime.h>
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#define CHECK_CUPTI(call)                                                              \
  do {                                                                                 \
    CUptiResult r_ = (call);                                                           \
    if (r_ != CUPTI_SUCCESS) {                                                         \
      const char* s_ = nullptr;                                                        \
      cuptiGetResultString(r_, &s_);                                                   \
      std::printf("FAILED %s -> %s\n", #call, s_ ? s_ : "?");                          \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

static std::vector<std::vector<unsigned char>> g_records;  // copies of every record, in order
static int g_contexts_created = 0;
static int g_buffers_completed = 0;
static bool g_give_no_buffer = false;  // argv[1] == "no-buffer": a profiler out of memory

static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  if (g_give_no_buffer) {
    *buffer = nullptr;
    *size = 0;
    *max_records = 0;
    return;
  }
  *size = 64 << 10;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  ++g_buffers_completed;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    size_t size = 0;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: size = sizeof(CUpti_ActivityKernel10); break;
      case CUPTI_ACTIVITY_KIND_MEMCPY: size = sizeof(CUpti_ActivityMemcpy6); break;
      case CUPTI_ACTIVITY_KIND_MEMSET: size = sizeof(CUpti_ActivityMemset4); break;
      case CUPTI_ACTIVITY_KIND_DRIVER: size = sizeof(CUpti_ActivityAPI); break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: size = sizeof(CUpti_ActivityExternalCorrelation); break;
      default: std::printf("unexpected record kind %d\n", record->kind); continue;
    }
    const auto* bytes = reinterpret_cast<const unsigned char*>(record);
    g_records.emplace_back(bytes, bytes + size);
  }
  std::free(buffer);
}

static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void*) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) ++g_contexts_created;
}

__global__ void scale(float* x, int n, float by) {
  extern __shared__ float scratch[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) x[i] = scratch[threadIdx.x] * by;
}

static const char* copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HTOD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DTOH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DTOD";
    default: return "OTHER";
  }
}

int main(int argc, char** argv) {
  g_give_no_buffer = argc > 1 && std::strcmp(argv[1], "no-buffer") == 0;
  CUpti_SubscriberHandle subscriber;
  CHECK_CUPTI(cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(on_callback), nullptr));
  CHECK_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED));
  CHECK_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_DRIVER,
                                  CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION})
    CHECK_CUPTI(cuptiActivityEnable(kind));
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_OVERHEAD}) {
    const char* name = nullptr;
    cuptiGetResultString(cuptiActivityEnable(kind), &name);
    std::printf("refused kind=%d result=%s\n", static_cast<int>(kind), name);
  }

  const int n = 1000;
  std::vector<float> host(n, 2.0f);
  float *a = nullptr, *b = nullptr;
  cudaMalloc(&a, n * sizeof(float));
  cudaMalloc(&b, n * sizeof(float));
  CHECK_CUPTI(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 42));
  cudaMemset(b, 0, n * sizeof(float));
  cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  scale<<<(n + 127) / 128, 128, 128 * sizeof(float)>>>(a, n, 3.0f);
  cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice, 0);
  uint64_t popped = 0;
  CHECK_CUPTI(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped));
  cudaMemcpy(host.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost);  // outside the external id
  cudaDeviceSynchronize();
  if (argc > 2 && std::strcmp(argv[1], "many") == 0) {
    const int launches = std::atoi(argv[2]);
    // It synchronizes every 256 launches, as a training loop does each step: when 1024
    // timed launches wait, at least 768 of them have finished, whatever the machine's
    // speed, so their records fill more buffers than the driver records alone.
    for (int i = 0; i < launches; ++i) {
      scale<<<1, 32, 32 * sizeof(float)>>>(a, 32, 1.0f);
      if (i % 256 == 255) cudaDeviceSynchronize();
    }
    cudaDeviceSynchronize();
    const int before_flush = g_buffers_completed;
    CHECK_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    int kernels = 0;
    for (const auto& r : g_records)
      kernels += reinterpret_cast<const CUpti_Activity*>(r.data())->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    std::printf("many kernels=%d buffers_before_flush=%d\n", kernels, before_flush);
    return 0;
  }
  CHECK_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));

  std::map<uint32_t, uint64_t> external;  // correlation id -> external id
  uint64_t kernel_end = 0;
  for (const auto& r : g_records) {
    const auto* rec = reinterpret_cast<const CUpti_Activity*>(r.data());
    if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
      external[e->correlationId] = e->externalId;
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      kernel_end = reinterpret_cast<const CUpti_ActivityKernel10*>(rec)->end;
    }
  }
  const auto ext = [&](uint32_t corr) { return external.count(corr) ? static_cast<long long>(external[corr]) : -1LL; };
  for (const auto& r : g_records) {
    const auto* rec = reinterpret_cast<const CUpti_Activity*>(r.data());
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      std::printf("kernel name=%s grid=%d block=%d dyn_shared=%d start_le_end=%d corr=%u ext=%lld\n", k->name,
                  k->gridX, k->blockX, k->dynamicSharedMemory, k->start > 0 && k->start <= k->end,
                  k->correlationId, ext(k->correlationId));
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      std::printf("memcpy kind=%s bytes=%llu async=%d start_le_end=%d corr=%u ext=%lld\n", copy_kind(m->copyKind),
                  static_cast<unsigned long long>(m->bytes), (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) != 0,
                  m->start > 0 && m->start <= m->end, m->correlationId, ext(m->correlationId));
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      std::printf("memset bytes=%llu value=%u corr=%u ext=%lld\n", static_cast<unsigned long long>(m->bytes), m->value,
                  m->correlationId, ext(m->correlationId));
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
      const auto* d = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
      const char* name = nullptr;
      cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, d->cbid, &name);
      std::printf("driver cbid=%s corr=%u api_before_kernel_end=%d\n", name ? name : "?", d->correlationId,
                  d->start <= d->end && d->start <= kernel_end);
    }
  }
  size_t dropped = 0;
  CHECK_CUPTI(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped));
  double sum = 0;
  for (float v : host) sum += v;
  std::printf("summary contexts_created=%d dropped=%zu popped=%llu result=%.1f\n", g_contexts_created, dropped,
              static_cast<unsigned long long>(popped), sum);
  CHECK_CUPTI(cuptiUnsubscribe(subscriber));
  CHECK_CUPTI(cuptiFinalize());
  return 0;
}
