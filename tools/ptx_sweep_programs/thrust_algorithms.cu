// Thrust's algorithms on device vectors, instantiated for the sweep
// (tools/ptx_sweep.py); never run.
#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <thrust/unique.h>

struct Square {
  __host__ __device__ float operator()(float x) const { return x * x; }
};
struct Positive {
  __host__ __device__ bool operator()(int x) const { return x > 0; }
};

float thrust_algorithms(thrust::device_vector<int>& keys, thrust::device_vector<float>& values) {
  thrust::sort(keys.begin(), keys.end());
  thrust::sort_by_key(keys.begin(), keys.end(), values.begin());
  thrust::transform(values.begin(), values.end(), values.begin(), Square());
  thrust::inclusive_scan(keys.begin(), keys.end(), keys.begin());
  auto end = thrust::unique(keys.begin(), keys.end());
  long positive = thrust::count_if(keys.begin(), end, Positive());
  return thrust::reduce(values.begin(), values.end()) + positive;
}
