// What tally's CUPTI costs a job: the same launches timed in the job with no
// activity kind enabled, then with kernel records on (each launch then carries two
// timing events), and the flush that turns them into records. Prints
//   off_us_per_launch=<t> on_us_per_launch=<t> flush_us_per_record=<t> records=<n>
// with the medians over `rounds` rounds of `launches` launches each.
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty_kernel(int) {}

static size_t g_records = 0;

static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 4 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) ++g_records;
  std::free(buffer);
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per launch of one round (launches queued, then a synchronize).
static double round_us(int launches) {
  const double start = now_us();
  for (int i = 0; i < launches; ++i) empty_kernel<<<1, 32>>>(i);
  cudaDeviceSynchronize();
  return (now_us() - start) / launches;
}

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  round_us(launches);  // module load, first launch
  std::vector<double> off, on, flush;
  for (int r = 0; r < rounds; ++r) off.push_back(round_us(launches));
  cuptiActivityRegisterCallbacks(requested, completed);
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::printf("cuptiActivityEnable failed\n");
    return 1;
  }
  for (int r = 0; r < rounds; ++r) {
    on.push_back(round_us(launches));
    const size_t before = g_records;
    const double start = now_us();
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    flush.push_back((now_us() - start) / std::max<size_t>(1, g_records - before));
  }
  std::printf("off_us_per_launch=%.3f on_us_per_launch=%.3f flush_us_per_record=%.3f records=%zu\n", median(off),
              median(on), median(flush), g_records);
  return g_records == static_cast<size_t>(launches) * rounds ? 0 : 1;
}
