// CUB's device-wide algorithms, instantiated for the sweep (tools/ptx_sweep.py): the
// host functions are never run, they only make nvcc emit the kernels.
#include <cub/cub.cuh>

struct IsOdd {
  __host__ __device__ bool operator()(int x) const { return x & 1; }
};

void device_algorithms(void* tmp, size_t bytes, int* in, int* out, float* fin, float* fout, int* offsets, int n,
                       cudaStream_t s) {
  cub::DeviceReduce::Sum(tmp, bytes, in, out, n, s);
  cub::DeviceReduce::Max(tmp, bytes, fin, fout, n, s);
  cub::DeviceReduce::ArgMin(tmp, bytes, fin, reinterpret_cast<cub::KeyValuePair<int, float>*>(fout), n, s);
  cub::DeviceScan::InclusiveSum(tmp, bytes, in, out, n, s);
  cub::DeviceScan::ExclusiveSum(tmp, bytes, fin, fout, n, s);
  cub::DeviceRadixSort::SortKeys(tmp, bytes, in, out, n, 0, 32, s);
  cub::DeviceRadixSort::SortPairs(tmp, bytes, fin, fout, in, out, n, 0, 32, s);
  cub::DeviceSelect::If(tmp, bytes, in, out, offsets, n, IsOdd(), s);
  cub::DeviceHistogram::HistogramEven(tmp, bytes, fin, out, 33, 0.0f, 1.0f, n, s);
  cub::DeviceSegmentedReduce::Sum(tmp, bytes, in, out, 16, offsets, offsets + 1, s);
  cub::DeviceRunLengthEncode::Encode(tmp, bytes, in, out, offsets, offsets + 1, n, s);
  cub::DeviceMergeSort::SortKeys(tmp, bytes, fin, n, cuda::std::less<float>(), s);
}
